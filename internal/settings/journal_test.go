package settings

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrashscope/thrashscope/internal/outdir"
)

// fakeFiles are kernel files in memory; a write to a path in fail fails;
// a swapoff is noted as a file "swapoff <node>".
type fakeFiles struct {
	v    map[string]string
	fail map[string]error
}

func (f *fakeFiles) Read(path string) (string, error) {
	v, ok := f.v[path]
	if !ok {
		return "", fs.ErrNotExist
	}
	return v, nil
}

func (f *fakeFiles) Write(path, value string) error {
	if err := f.fail[path]; err != nil {
		return err
	}
	f.v[path] = value
	return nil
}

// SwapOff marks node off swap.
func (f *fakeFiles) SwapOff(node string) error {
	f.v["swapoff "+node] = "done"
	return nil
}

const (
	pageCluster = "/proc/sys/vm/page-cluster"
	zswap       = "/sys/module/zswap/parameters/enabled"
)

func newFiles() *fakeFiles {
	return &fakeFiles{v: map[string]string{pageCluster: "3", zswap: "N"}, fail: map[string]error{}}
}

func dataDir(t *testing.T) *outdir.Dir {
	t.Helper()
	d, err := outdir.Open(t.TempDir(), 0o750)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func journalled(t *testing.T, d *outdir.Dir) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(d.Path(), JournalFile))
	return err == nil
}

// Each change is on disk before the kernel file is written, and Restore
// gives every value back, the last change first, then removes the journal.
func TestJournalRestoresEveryValue(t *testing.T) {
	d, files := dataDir(t), newFiles()
	j, err := Begin(d, files, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Change{{File: pageCluster, After: "0"}, {File: zswap, After: "Y"}, {File: pageCluster, After: "1"}, {File: zswap, After: "Y"}} {
		if err := j.Set(c.File, c.After); err != nil {
			t.Fatal(err)
		}
		if !journalled(t, d) {
			t.Fatalf("after setting %s, no journal in the data dir", c.File)
		}
	}
	if files.v[pageCluster] != "1" || files.v[zswap] != "Y" || len(j.Done) != 3 {
		t.Fatalf("files %v, %d changes journalled; want page-cluster 1, zswap Y, 3 changes (the fourth changed nothing)", files.v, len(j.Done))
	}
	if err := j.Restore(); err != nil {
		t.Fatal(err)
	}
	if files.v[pageCluster] != "3" || files.v[zswap] != "N" || journalled(t, d) {
		t.Errorf("after Restore: files %v, journal left %v; want 3, N and no journal", files.v, journalled(t, d))
	}
}

// A process killed after its changes leaves the journal; the next one
// restores the host from it at its start, and refuses no run after.
func TestRecoverAfterAKill(t *testing.T) {
	d, files := dataDir(t), newFiles()
	j, err := Begin(d, files, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Set(pageCluster, "0"); err != nil {
		t.Fatal(err)
	}
	// A write the kernel refused is journalled all the same: restoring
	// writes back what the file held.
	files.fail[zswap] = errors.New("EINVAL")
	if err := j.Set(zswap, "Y"); err == nil || !strings.Contains(err.Error(), zswap) {
		t.Errorf("a refused write: %v, want an error naming %s", err, zswap)
	}
	delete(files.fail, zswap)
	// kill -9: j is gone with its process.
	if _, err := Begin(d, files, "run-2"); err == nil || !strings.Contains(err.Error(), "run-1") {
		t.Errorf("a second run while run-1's journal is there: %v, want a refusal naming run-1", err)
	}
	got, err := Recover(d, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || files.v[pageCluster] != "3" || files.v[zswap] != "N" || journalled(t, d) {
		t.Errorf("Recover: %+v, files %v, journal left %v; want both back and no journal", got, files.v, journalled(t, d))
	}
	if got, err := Recover(d, files); got != nil || err != nil {
		t.Errorf("Recover with no journal: %v, %v", got, err)
	}
	if _, err := Begin(d, files, "run-2"); err != nil {
		t.Errorf("a run after the recovery: %v", err)
	}
}

// A value that cannot be written back keeps the journal for the next start.
func TestRestoreFailureKeepsTheJournal(t *testing.T) {
	d, files := dataDir(t), newFiles()
	j, _ := Begin(d, files, "run-1")
	if err := j.Set(pageCluster, "0"); err != nil {
		t.Fatal(err)
	}
	files.fail[pageCluster] = errors.New("EPERM")
	if err := j.Restore(); err == nil || !strings.Contains(err.Error(), pageCluster) || !journalled(t, d) {
		t.Errorf("restore refused: %v, journal left %v; want an error naming the file and the journal kept", err, journalled(t, d))
	}
	delete(files.fail, pageCluster)
	if _, err := Recover(d, files); err != nil || files.v[pageCluster] != "3" {
		t.Errorf("next start: %v, page-cluster %s", err, files.v[pageCluster])
	}
}

// A journal that is not thrashscope's is refused with what to do, and
// restores nothing.
func TestAForeignJournalIsRefused(t *testing.T) {
	for name, text := range map[string]string{
		"garbage":        "not json",
		"not the kernel": `{"run":"x","changes":[{"file":"/etc/passwd","before":"","after":"x"}]}`,
		"unknown field":  `{"run":"x","changes":[],"extra":1}`,
	} {
		d, files := dataDir(t), newFiles()
		if err := d.WriteFile(JournalFile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Recover(d, files); err == nil || !strings.Contains(err.Error(), JournalFile) {
			t.Errorf("%s: %v, want an error naming the journal", name, err)
		}
		if files.v[pageCluster] != "3" {
			t.Errorf("%s: a file was written", name)
		}
	}
}

// A zram device made swap is journalled before it is, and a recovery takes
// it off swap and resets it, after the files changed since (in reverse);
// a journal naming a device that is not a zram device is refused.
func TestRecoverResetsAZramDevice(t *testing.T) {
	d, files := dataDir(t), newFiles()
	files.v["/sys/block/zram0/reset"] = ""
	j, err := Begin(d, files, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := j.swapon("/dev/zram0"); err != nil {
		t.Fatal(err)
	}
	if err := j.Set(zswap, "N"); err != nil { // already N: not journalled
		t.Fatal(err)
	}
	if err := j.Set(pageCluster, "0"); err != nil {
		t.Fatal(err)
	}
	got, err := Recover(d, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || files.v["swapoff /dev/zram0"] != "done" || files.v["/sys/block/zram0/reset"] != "1" || files.v[pageCluster] != "3" || journalled(t, d) {
		t.Errorf("Recover: %+v, files %v; want zram0 off swap and reset, page-cluster back, no journal", got, files.v)
	}

	if err := d.WriteFile(JournalFile, []byte(`{"run":"x","changes":[{"swapon":"/dev/sda"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Recover(d, files); err == nil || !strings.Contains(err.Error(), "not a kernel file") {
		t.Errorf("a journal naming /dev/sda: %v, want a refusal", err)
	}
	if _, ok := files.v["swapoff /dev/sda"]; ok {
		t.Error("a device not zram was taken off swap")
	}
}
