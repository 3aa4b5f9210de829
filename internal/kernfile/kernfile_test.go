package kernfile

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stateOf is the state letter of a /proc/<pid>/stat reading.
func stateOf(t *testing.T, b []byte) string {
	t.Helper()
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+3 > len(b) {
		t.Fatalf("not a stat line: %q", b)
	}
	return string(b[i+2])
}

// A kept-open /proc/<pid>/stat is generated afresh at each read: a child
// stopped, then continued, reads T, then not T; once it is reaped, the read
// fails and the file is closed, never a stale reading.
func TestReadsAfreshAndForgetsTheGone(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	path := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat"
	var s Set
	defer s.Close()
	waitState := func(want func(string) bool, what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			b, err := s.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if st := stateOf(t, b); want(st) {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("state %s, want %s", st, what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitState(func(st string) bool { return st == "S" }, "S")
	if s.Len() != 1 {
		t.Fatalf("%d files open, want 1", s.Len())
	}
	_ = cmd.Process.Signal(syscall.SIGSTOP)
	waitState(func(st string) bool { return st == "T" }, "T (stopped)")
	_ = cmd.Process.Signal(syscall.SIGCONT)
	waitState(func(st string) bool { return st != "T" }, "not T (continued)")
	if s.Len() != 1 {
		t.Fatalf("%d files open after the reads, want the one kept", s.Len())
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if b, err := s.ReadFile(path); err == nil {
		t.Fatalf("read %q of a reaped process", b)
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err %v, want not exist", err)
	}
	if s.Len() != 0 {
		t.Fatalf("%d files open after the process went, want 0", s.Len())
	}
}

// Sweep closes what was not read since the last Sweep; a file larger than
// the first buffer is read whole.
func TestSweepAndLargeFiles(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("0123456789abcdef", 1024) // 16 KiB
	for name, text := range map[string]string{"a": "1\n", "b": big} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var s Set
	defer s.Close()
	for _, name := range []string{"a", "b"} {
		if _, err := s.ReadFile(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := s.ReadFile(filepath.Join(dir, "b"))
	if err != nil || string(b) != big {
		t.Fatalf("read %d bytes, err %v; want the %d written", len(b), err, len(big))
	}
	s.Sweep() // both read since the start
	if s.Len() != 2 {
		t.Fatalf("%d open after the first sweep, want 2", s.Len())
	}
	if _, err := s.ReadFile(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	s.Sweep()
	if s.Len() != 1 {
		t.Fatalf("%d open after b went unread a round, want 1", s.Len())
	}
	if _, err := s.ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err %v, want not exist", err)
	}
}

// ReadFileAt reads and keeps open the file name in dir, one file however
// often it is read, also with dir written with a trailing slash; a file that
// is not there is named whole in the error.
func TestReadFileAt(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte("max\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var s Set
	defer s.Close()
	for range 3 {
		if b, err := s.ReadFileAt(dir, "memory.max"); err != nil || string(b) != "max\n" {
			t.Fatalf("read %q, err %v; want the file's", b, err)
		}
	}
	if s.Len() != 1 {
		t.Fatalf("%d files open after three readings of one, want 1", s.Len())
	}
	if b, err := s.ReadFileAt(dir+"/", "memory.max"); err != nil || string(b) != "max\n" {
		t.Fatalf("with a trailing slash: read %q, err %v", b, err)
	}
	_, err := s.ReadFileAt(dir, "memory.high")
	if want := filepath.Join(dir, "memory.high"); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want not exist naming %s", err, want)
	}
}
