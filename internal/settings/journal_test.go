package settings

import (
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeFiles are kernel files in memory; a write to a path in fail fails;
// a swapoff is noted as a file "swapoff <node>"; zram holds each device.
type fakeFiles struct {
	v    map[string]string
	fail map[string]error
	zram map[string]ZramState
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
	if node, ok := strings.CutSuffix(strings.Replace(path, "/sys/block/", "/dev/", 1), "/reset"); ok && value == "1" {
		f.zram[node] = ZramState{}
	}
	return nil
}

// SwapOff marks node off swap.
func (f *fakeFiles) SwapOff(node string) error {
	f.v["swapoff "+node] = "done"
	st := f.zram[node]
	st.Swap = false
	f.zram[node] = st
	return nil
}

func (f *fakeFiles) Zram(node string) (ZramState, error) { return f.zram[node], nil }

const (
	pageCluster = "/proc/sys/vm/page-cluster"
	zswap       = "/sys/module/zswap/parameters/enabled"
)

func newFiles() *fakeFiles {
	return &fakeFiles{v: map[string]string{pageCluster: "3", zswap: "N"}, fail: map[string]error{}, zram: map[string]ZramState{}}
}

// stateDir is a state directory as OpenState makes it.
func stateDir(t *testing.T) *State {
	t.Helper()
	s, err := OpenState(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func journalled(t *testing.T, s *State) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(s.Path(), JournalFile))
	return err == nil
}

func begin(t *testing.T, s *State, files File, run string) *Journal {
	t.Helper()
	j, _, err := Begin(s, files, run, true)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// Each change is on disk before the kernel file is written, and Restore
// gives every value back, the last change first, then removes the journal
// and frees the lock.
func TestJournalRestoresEveryValue(t *testing.T) {
	s, files := stateDir(t), newFiles()
	j := begin(t, s, files, "run-1")
	for _, c := range []Change{{File: pageCluster, After: "0"}, {File: zswap, After: "Y"}, {File: pageCluster, After: "1"}, {File: zswap, After: "Y"}} {
		if err := j.Set(c.File, c.After); err != nil {
			t.Fatal(err)
		}
		if !journalled(t, s) {
			t.Fatalf("after setting %s, no journal in the state dir", c.File)
		}
	}
	if files.v[pageCluster] != "1" || files.v[zswap] != "Y" || len(j.Done) != 3 {
		t.Fatalf("files %v, %d changes journalled; want page-cluster 1, zswap Y, 3 changes (the fourth changed nothing)", files.v, len(j.Done))
	}
	if _, err := j.Restore(); err != nil {
		t.Fatal(err)
	}
	if files.v[pageCluster] != "3" || files.v[zswap] != "N" || journalled(t, s) {
		t.Errorf("after Restore: files %v, journal left %v; want 3, N and no journal", files.v, journalled(t, s))
	}
	if _, err := Recover(s, files); err != nil {
		t.Errorf("the lock after Restore: %v, want it free", err)
	}
}

// A process killed after its changes leaves the journal; while its lock
// is held (it is alive) no one touches it; once it is gone, the next
// process to take the lock restores the host from it, and logs what it
// overwrote.
func TestRecoverAfterAKill(t *testing.T) {
	s, files := stateDir(t), newFiles()
	j := begin(t, s, files, "run-1")
	if err := j.Set(pageCluster, "0"); err != nil {
		t.Fatal(err)
	}
	// A write the kernel refused is journalled all the same: its restore
	// finds the file as it was.
	files.fail[zswap] = errors.New("EINVAL")
	if err := j.Set(zswap, "Y"); err == nil || !strings.Contains(err.Error(), zswap) {
		t.Errorf("a refused write: %v, want an error naming %s", err, zswap)
	}
	delete(files.fail, zswap)
	// Another process while run-1's is alive: neither a run nor a
	// recovery, and nothing written.
	if _, _, err := Begin(s, files, "run-2", true); !errors.Is(err, ErrBusy) {
		t.Errorf("a second run while run-1 holds the lock: %v, want ErrBusy", err)
	}
	if _, err := Recover(s, files); !errors.Is(err, ErrBusy) || files.v[pageCluster] != "0" || !journalled(t, s) {
		t.Errorf("a recovery while run-1 holds the lock: %v, page-cluster %s; want ErrBusy and run-1's change left alone", err, files.v[pageCluster])
	}
	j.Abandon() // kill -9
	j2, outs, err := Begin(s, files, "run-2", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 2 || files.v[pageCluster] != "3" || files.v[zswap] != "N" || journalled(t, s) {
		t.Errorf("run-2's begin: %+v, files %v, journal left %v; want both back and no journal", outs, files.v, journalled(t, s))
	}
	for _, o := range outs {
		want := map[string]string{pageCluster: "restored", zswap: "unchanged"}[o.File]
		if o.Action != want || (o.File == pageCluster && o.Found != "0") {
			t.Errorf("%s: %s (found %q), want %s (found 0 for page-cluster)", o.File, o.Action, o.Found, want)
		}
	}
	j2.Restore()
	if got, err := Recover(s, files); got != nil || err != nil {
		t.Errorf("Recover with no journal: %v, %v", got, err)
	}
}

// A value that cannot be written back stays journalled, alone: what was
// restored is not written again at the next start, and the lock is freed.
func TestRestoreFailureKeepsOnlyWhatFailed(t *testing.T) {
	s, files := stateDir(t), newFiles()
	j := begin(t, s, files, "run-1")
	if err := j.Set(zswap, "Y"); err != nil {
		t.Fatal(err)
	}
	if err := j.Set(pageCluster, "0"); err != nil {
		t.Fatal(err)
	}
	files.fail[pageCluster] = errors.New("EPERM")
	if _, err := j.Restore(); err == nil || !strings.Contains(err.Error(), pageCluster) || !journalled(t, s) {
		t.Errorf("restore refused: %v, journal left %v; want an error naming the file and the journal kept", err, journalled(t, s))
	}
	left, err := read(s)
	if err != nil || left == nil || len(left.Done) != 1 || left.Done[0].File != pageCluster {
		t.Fatalf("the journal kept %+v (%v), want page-cluster alone", left, err)
	}
	// A run asked for meanwhile tries the restore again, under the lock it
	// takes, and is refused with advice that works.
	if _, _, err := Begin(s, files, "run-2", true); err == nil || !strings.Contains(err.Error(), "by hand") || errors.Is(err, ErrBusy) {
		t.Errorf("a run over a journal that cannot be restored: %v, want a refusal saying to restore it by hand", err)
	}
	files.v[zswap] = "Y" // an administrator turns zswap on after the run
	delete(files.fail, pageCluster)
	if _, err := Recover(s, files); err != nil || files.v[pageCluster] != "3" || files.v[zswap] != "Y" {
		t.Errorf("next start: %v, page-cluster %s, zswap %s; want 3, and the administrator's Y", err, files.v[pageCluster], files.v[zswap])
	}
}

// A file an administrator changed while the run ran is left as they set
// it, and said so; the rest is restored.
func TestRestoreKeepsAnAdministratorsChange(t *testing.T) {
	s, files := stateDir(t), newFiles()
	j := begin(t, s, files, "run-1")
	if err := j.Set(zswap, "Y"); err != nil {
		t.Fatal(err)
	}
	if err := j.Set(pageCluster, "0"); err != nil {
		t.Fatal(err)
	}
	files.v[pageCluster] = "5"
	rec := &Record{}
	outs, err := j.Finish(rec)
	if err != nil {
		t.Fatal(err)
	}
	if files.v[pageCluster] != "5" || files.v[zswap] != "N" || journalled(t, s) {
		t.Errorf("files %v, journal left %v; want the administrator's 5, zswap N, no journal", files.v, journalled(t, s))
	}
	if len(outs) != 2 || outs[0].Action != "kept" || outs[0].Found != "5" || len(rec.Kept) != 1 || !strings.Contains(rec.Kept[0], pageCluster) {
		t.Errorf("outcomes %+v, record kept %q; want page-cluster kept at 5, and said in the record", outs, rec.Kept)
	}
}

// The journal is trusted for nothing: each forged shape is refused whole,
// with what to do, before any file is written.
func TestAForgedJournalIsRefused(t *testing.T) {
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("root's own\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	uuid := strings.Repeat("ab", 16)
	for name, text := range map[string]string{
		"garbage":              "not json",
		"not the kernel":       `{"run":"x","changes":[{"file":"/etc/passwd","before":"x","after":"y"}]}`,
		"a path out of /sys":   `{"run":"x","changes":[{"file":"/sys/..` + victim + `","before":"PWNED","after":"y"}]}`,
		"a path cleaned":       `{"run":"x","changes":[{"file":"/proc/sys/vm/../vm/page-cluster","before":"0","after":"3"}]}`,
		"a sysctl of no run":   `{"run":"x","changes":[{"file":"/proc/sys/kernel/core_pattern","before":"|/tmp/x","after":"core"}]}`,
		"a file and a device":  `{"run":"x","changes":[{"file":"/proc/sys/vm/page-cluster","before":"0","after":"3","swapon":"/dev/sda","uuid":"` + uuid + `","size":1}]}`,
		"not a zram device":    `{"run":"x","changes":[{"swapon":"/dev/sda","uuid":"` + uuid + `","size":67108864}]}`,
		"zram, not sized":      `{"run":"x","changes":[{"swapon":"/dev/zram0"}]}`,
		"a value of two lines": `{"run":"x","changes":[{"file":"/proc/sys/vm/page-cluster","before":"0\n1","after":"3"}]}`,
		"an empty value":       `{"run":"x","changes":[{"file":"/proc/sys/vm/page-cluster","before":"","after":"3"}]}`,
		"unknown field":        `{"run":"x","changes":[],"extra":1}`,
		"duplicate key":        `{"run":"x","run":"y","changes":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			s, files := stateDir(t), newFiles()
			files.v[pageCluster] = "0"
			if err := s.dir.WriteFile(JournalFile, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Recover(s, files); err == nil || !strings.Contains(err.Error(), JournalFile) || !strings.Contains(err.Error(), "remove it") {
				t.Errorf("%v, want an error naming the journal and how to clear it", err)
			}
			if files.v[pageCluster] != "0" || len(files.v) != 2 {
				t.Errorf("a file was written: %v", files.v)
			}
			if _, _, err := Begin(s, files, "run-2", true); err == nil {
				t.Error("a run began over a forged journal")
			}
		})
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's own\n" {
		t.Errorf("the victim file reads %q", b)
	}
	// The same with the host's own files, through the path the observer
	// takes: the victim is not written.
	s := stateDir(t)
	if err := s.dir.WriteFile(JournalFile, []byte(`{"run":"x","changes":[{"file":"/sys/..`+victim+`","before":"PWNED","after":"root's own"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Recover(s, Host{}); err == nil {
		t.Error("a journal naming a file out of /sys was acted on")
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's own\n" {
		t.Errorf("the victim file reads %q after a forged journal", b)
	}
}

// A journal that is not a regular file of the running user's, writable by
// it alone, is refused without being opened through a link or blocking on
// a FIFO; so is a state directory another user could write.
func TestAPlantedJournalIsRefused(t *testing.T) {
	good := `{"run":"x","changes":[{"file":"/proc/sys/vm/page-cluster","before":"3","after":"0"}]}`
	target := filepath.Join(t.TempDir(), "journal")
	if err := os.WriteFile(target, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, plant := range map[string]func(path string) error{
		"a link":           func(p string) error { return os.Symlink(target, p) },
		"a FIFO":           func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"group-writable":   func(p string) error { return writeMode(p, good, 0o620) },
		"world-writable":   func(p string) error { return writeMode(p, good, 0o606) },
		"a directory":      func(p string) error { return os.Mkdir(p, 0o700) },
		"larger than 64 K": func(p string) error { return writeMode(p, strings.Repeat(" ", maxJournalBytes+1), 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			s, files := stateDir(t), newFiles()
			files.v[pageCluster] = "0"
			if err := plant(filepath.Join(s.Path(), JournalFile)); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := Recover(s, files); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Error("acted on it")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the recovery blocked")
			}
			if files.v[pageCluster] != "0" {
				t.Errorf("page-cluster written: %v", files.v)
			}
		})
	}
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o2770); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenState(dir); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("a group-writable state directory: %v, want a refusal saying chmod go-w", err)
	}
}

func writeMode(p, text string, mode os.FileMode) error {
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

// A zram device made swap is journalled before it is sized, with its
// header's UUID; a recovery takes it off swap and resets it, after the
// files changed since (in reverse), while it is still the run's; a device
// someone else took since, or never sized, is left alone.
func TestRecoverResetsTheRunsZramDeviceOnly(t *testing.T) {
	uuid := []byte("0123456789abcdef")
	const size = 64 << 20
	for name, c := range map[string]struct {
		now        ZramState
		wantAction string
	}{
		"the run's swap":             {ZramState{Swap: true, DiskSize: size, UUID: hex.EncodeToString(uuid)}, "restored"},
		"sized, no header yet":       {ZramState{DiskSize: size}, "restored"},
		"never sized":                {ZramState{}, "unchanged"},
		"another's since":            {ZramState{Swap: true, DiskSize: 2 * size, UUID: strings.Repeat("cd", 16)}, "kept"},
		"another's, the same size":   {ZramState{Swap: true, DiskSize: size, UUID: strings.Repeat("cd", 16)}, "kept"},
		"sized by another, not swap": {ZramState{DiskSize: 2 * size}, "kept"},
	} {
		t.Run(name, func(t *testing.T) {
			s, files := stateDir(t), newFiles()
			j := begin(t, s, files, "run-1")
			if err := j.swapon("/dev/zram0", size, uuid); err != nil {
				t.Fatal(err)
			}
			if err := j.Set(pageCluster, "0"); err != nil {
				t.Fatal(err)
			}
			files.zram["/dev/zram0"] = c.now
			j.Abandon()
			outs, err := Recover(s, files)
			if err != nil {
				t.Fatal(err)
			}
			if len(outs) != 2 || outs[0].File != pageCluster || outs[1].Swapon != "/dev/zram0" || outs[1].Action != c.wantAction {
				t.Fatalf("outcomes %+v, want page-cluster first, then zram0 %s", outs, c.wantAction)
			}
			reset := files.v["/sys/block/zram0/reset"] == "1"
			if reset != (c.wantAction == "restored") || files.v[pageCluster] != "3" || journalled(t, s) {
				t.Errorf("reset %v, files %v, journal left %v", reset, files.v, journalled(t, s))
			}
			if _, off := files.v["swapoff /dev/zram0"]; off != (c.wantAction == "restored" && c.now.Swap) {
				t.Errorf("swapoff %v", off)
			}
		})
	}
}
