package outdir_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/thrashscope/thrashscope/internal/outdir"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// A link planted at a file's name is replaced, and the file it pointed at
// is left as it was: writing follows no link.
func TestWriteFileReplacesALinkInsteadOfFollowingIt(t *testing.T) {
	out := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("root's file\n"), 0o600)
	os.Symlink(victim, filepath.Join(out, "compare.txt"))
	d, err := outdir.Open(out, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.WriteFile("compare.txt", []byte("table\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's file\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	fi, err := os.Lstat(filepath.Join(out, "compare.txt"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("compare.txt is %v (%v), want a regular file", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "compare.txt")); string(b) != "table\n" {
		t.Errorf("compare.txt holds %q", b)
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
}

// A link planted at a subdirectory's name is refused, wherever it points.
func TestSubRefusesALink(t *testing.T) {
	out := t.TempDir()
	elsewhere := t.TempDir()
	os.Symlink(elsewhere, filepath.Join(out, "20261122-032121-67c5ed"))
	os.Mkdir(filepath.Join(out, "inside"), 0o755)
	os.Symlink("inside", filepath.Join(out, "alias"))
	d, err := outdir.Open(out, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, name := range []string{"20261122-032121-67c5ed", "alias"} {
		if _, err := d.Sub(name, 0o755); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
			t.Errorf("Sub(%s) over a link: %v", name, err)
		}
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("written through the link: %v", ents)
	}
	sub, err := d.Sub("new", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.WriteFile("paper.png", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "new", "paper.png")); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"..", "a/b", "", "."} {
		if _, err := d.Sub(bad, 0o755); err == nil {
			t.Errorf("Sub(%q) was made", bad)
		}
		if err := d.WriteFile(bad, nil, 0o644); err == nil {
			t.Errorf("WriteFile(%q) was written", bad)
		}
	}
}

// A directory every user can write to is refused, and so is one another
// user owns (made here by root for uid 65534, as a user of /var/tmp could).
func TestOpenRefusesADirectoryOthersControl(t *testing.T) {
	open := filepath.Join(t.TempDir(), "shared")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if _, err := outdir.Open(open, 0o755); err == nil || !strings.Contains(err.Error(), "writable by every user") {
		t.Errorf("a world-writable directory: %v", err)
	}
	testenv.RequirePrivileged(t)
	theirs := filepath.Join(t.TempDir(), "theirs")
	os.Mkdir(theirs, 0o755)
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := outdir.Open(theirs, 0o755); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("a directory of another user: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink(t.TempDir(), link)
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := outdir.Open(link, 0o755); err == nil || !strings.Contains(err.Error(), "(a symbolic link) is owned by uid 65534") {
		t.Errorf("a link of another user: %v", err)
	}
	// Missing, it is made, and the caller's.
	made := filepath.Join(t.TempDir(), "a", "b")
	d, err := outdir.Open(made, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
}

// ReadFile reads a regular file within its bound, and never through a link.
func TestReadFileFollowsNoLink(t *testing.T) {
	out := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("secret\n"), 0o600)
	os.Symlink(victim, filepath.Join(out, "journal"))
	os.WriteFile(filepath.Join(out, "big"), make([]byte, 100), 0o600)
	os.WriteFile(filepath.Join(out, "small"), []byte("ok"), 0o600)
	d, err := outdir.Open(out, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if b, err := d.ReadFile("journal", 1<<10); err == nil {
		t.Errorf("read %q through a link", b)
	}
	if _, err := d.ReadFile("big", 10); err == nil || !strings.Contains(err.Error(), "at most 10 bytes") {
		t.Errorf("a file past its bound: %v", err)
	}
	if b, err := d.ReadFile("small", 10); err != nil || string(b) != "ok" {
		t.Errorf("small: %q, %v", b, err)
	}
	if _, err := d.ReadFile("missing", 10); !os.IsNotExist(err) {
		t.Errorf("missing: %v, want not-exist", err)
	}
}

// A directory locked by one opening is refused to a second, with
// ErrLocked, until the first closes it.
func TestLockHoldsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	a, err := outdir.Open(dir, 0o750)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Lock(); err != nil {
		t.Fatal(err)
	}
	b, err := outdir.Open(dir, 0o750)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Lock(); !errors.Is(err, outdir.ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Errorf("a second lock: %v, want ErrLocked naming %s", err, dir)
	}
	a.Close()
	if err := b.Lock(); err != nil {
		t.Errorf("the lock once the first is closed: %v", err)
	}
}

// Private refuses a directory its group can write; a FIFO planted at a
// file's name is refused without blocking.
func TestPrivateAndAFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o2770); err != nil {
		t.Fatal(err)
	}
	d, err := outdir.Open(dir, 0o750)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Private(); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("a group-writable directory: %v", err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ReadFile("fifo", 10); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO: %v", err)
	}
}
