package runner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/runner"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/strictjson"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// A run that ends while --data.dir is read-only: every reader sees it as it
// ended, no other run takes its place, and its final save lands once the
// directory is writable again. The defect: GET /runs/{id} said completed
// while the list and the file said running, nothing rewrote the file, and
// a restart marked the run aborted with every consumer's exit null.
func TestFinalSaveLandsAfterTheDataDirWasReadOnly(t *testing.T) {
	testenv.RequirePrivileged(t)
	// The data dir is a file system of its own, so it can be made
	// read-only under the manager's open directory.
	data := t.TempDir()
	if err := unix.Mount("tmpfs", data, "tmpfs", 0, "size=64m,mode=0750"); err != nil {
		t.Fatalf("mounting a tmpfs for the data dir: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(data, unix.MNT_DETACH) })
	readOnly := func(ro bool) {
		t.Helper()
		flags := uintptr(unix.MS_REMOUNT)
		if ro {
			flags |= unix.MS_RDONLY
		}
		if err := unix.Mount("tmpfs", data, "tmpfs", flags, "size=64m,mode=0750"); err != nil {
			t.Fatalf("remounting the data dir (read-only %v): %v", ro, err)
		}
	}

	own, err := cgroup.Own("/proc")
	if err != nil {
		t.Fatalf("no cgroup for runs: %v", err)
	}
	parentCg, err := own.Create("readonly-parent", cgroup.Limits{MemoryBytes: 512 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { parentCg.Destroy(context.Background()) })
	st, err := store.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := procfs.NewFS("/proc")
	m, err := runner.New(runner.Config{Store: st, ProcFS: fs, Binary: testenv.Binary(t, "loadgen"),
		Parent: cgroup.Parent{Path: parentCg.Path, V2: own.V2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)

	spec := run.Spec{Preset: "e4", Consumers: new(2), Scale: new(0.05), LeadIn: new(run.Duration(time.Second))}
	rec, err := m.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	fileState := func() string {
		b, err := os.ReadFile(filepath.Join(data, "runs", rec.ID, store.RecordFile))
		if err != nil {
			t.Fatal(err)
		}
		var r run.Record
		if err := strictjson.Decode(b, &r); err != nil {
			t.Fatalf("the record file: %v", err)
		}
		return r.State
	}
	// Every consumer started (the plan is 5 s), then the disk goes.
	waitFor(t, 20*time.Second, "both consumers started", func() bool {
		r, _ := m.Service().Get(rec.ID)
		return len(r.Consumers) == 2 && r.Consumers[1].ActualStart != nil
	})
	readOnly(true)
	waitFor(t, 30*time.Second, "the run to end", func() bool {
		r, _ := m.Service().Get(rec.ID)
		return !run.Active(r.State)
	})
	got, _ := m.Service().Get(rec.ID)
	page, _, err := m.Service().List(context.Background(), "", 10)
	if err != nil || len(page) != 1 {
		t.Fatalf("list: %v %v", page, err)
	}
	if got.State != run.StateCompleted || page[0].State != got.State {
		t.Errorf("the record says %s, the list %s: every reader must see the run as it ended", got.State, page[0].State)
	}
	if s := fileState(); s != run.StateRunning {
		t.Fatalf("the record file says %s with the data dir read-only", s)
	}
	// Another run would take its place in memory: refused while its
	// final record is not on disk.
	if _, err := m.Start(spec); !errors.Is(err, run.ErrNoStorage) {
		t.Errorf("a run started while the last one's final record is unsaved: %v, want ErrNoStorage", err)
	}

	readOnly(false)
	waitFor(t, 45*time.Second, "the final save to land", func() bool { return fileState() == run.StateCompleted })
	onDisk, err := st.LoadRecord(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range onDisk.Consumers {
		if c.Exit != "ok" {
			t.Errorf("consumer %d's exit on disk is %q, want ok", c.Index, c.Exit)
		}
	}
}

// waitFor polls cond until it holds, failing after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
