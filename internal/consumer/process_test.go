package consumer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The protocol's files are placed at their descriptors: exec.Cmd's
// ExtraFiles start at fd 3.
func TestExtraFilesPlaceEachAtItsFD(t *testing.T) {
	m, j, b, u := os.NewFile(100, "m"), os.NewFile(101, "j"), os.NewFile(102, "b"), os.NewFile(103, "u")
	files := ExtraFiles(m, j, b, u)
	for fd, want := range map[int]*os.File{MessageFD: m, JoinFD: j, BoardFD: b, UnifiedJoinFD: u} {
		if fd-3 >= len(files) || files[fd-3] != want {
			t.Errorf("fd %d holds %v, want %s", fd, files, want.Name())
		}
	}
	if got := ExtraFiles(m, j, nil, nil); len(got) != 2 {
		t.Errorf("without a board: %d files, want the message pipe and the join file", len(got))
	}
	// The unified group's file without a board: fd 5 stays closed.
	if got := ExtraFiles(m, j, nil, u); len(got) != 4 || got[BoardFD-3] != nil || got[UnifiedJoinFD-3] != u {
		t.Errorf("without a board, with the unified group: %v", got)
	}
}

// A consumer started by hand, without the message pipe or the join file,
// is told which descriptor is wrong and that a master starts consumers.
func TestProtocolFilesAreChecked(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := messagePipe(int(w.Fd())); err != nil {
		t.Errorf("a pipe refused as the message pipe: %v", err)
	}
	dir := t.TempDir()
	plain, err := os.Create(filepath.Join(dir, "regular"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var usage *UsageError
	if _, err := messagePipe(int(plain.Fd())); !errors.As(err, &usage) || !strings.Contains(err.Error(), "must be the message pipe") {
		t.Errorf("a regular file as the message pipe: %v, want a UsageError naming it", err)
	}
	if _, err := messagePipe(1 << 20); !errors.As(err, &usage) {
		t.Errorf("a closed descriptor as the message pipe: %v, want a UsageError", err)
	}
	procs, err := os.Create(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	defer procs.Close()
	if _, err := joinFile(int(procs.Fd())); err != nil {
		t.Errorf("a cgroup.procs refused as the join file: %v", err)
	}
	if _, err := joinFile(int(plain.Fd())); !errors.As(err, &usage) || !strings.Contains(err.Error(), "cgroup.procs") {
		t.Errorf("another file as the join file: %v, want a UsageError naming cgroup.procs", err)
	}
	if err := ProcessMain(Config{}); !errors.As(err, &usage) {
		t.Errorf("an invalid config: %v, want a UsageError", err)
	}
}

// Before it joins, a consumer has its threads started and each has taken
// a signal, so its signal stack is resident.
func TestThreadsStartedAndSignalled(t *testing.T) {
	const n = 6
	startThreads(n)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) < n {
		t.Errorf("%d threads after startThreads(%d)", len(tasks), n)
	}
	if took := touchSignalStacks(); took < n {
		t.Errorf("%d threads took the signal of %d, want at least %d", took, len(tasks), n)
	}
}
