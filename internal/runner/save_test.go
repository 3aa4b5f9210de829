package runner_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/runner"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// TestRestartActsOnlyOnItsOwn: a starting manager settles records a dead
// observer left, but destroys only stale run cgroups under its own parent.
//   - a record naming a cgroup outside --cgroup.parent leaves that cgroup
//     and its process alone (it used to SIGKILL them);
//   - a run cgroup under the parent that a live process holds (another
//     observer's active run) survives, its process too;
//   - one nobody holds (its owner died) is swept.
func TestRestartActsOnlyOnItsOwn(t *testing.T) {
	testenv.RequirePrivileged(t)
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	own, err := cgroup.Own("/proc")
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("no cgroup parent here: %v", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The run parent, and a sibling outside it, both made by this test.
	parentCg, err := own.Create("restart-parent", cgroup.Limits{MemoryBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { parentCg.Destroy(context.Background()) })
	outsideParent, err := own.Create("restart-outside", cgroup.Limits{MemoryBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outsideParent.Destroy(context.Background()) })
	parent := cgroup.Parent{Path: parentCg.Path, V2: own.V2}
	outside := cgroup.Parent{Path: outsideParent.Path, V2: own.V2}

	sleeperIn := func(c *cgroup.Cgroup) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		if err := c.Add(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	foreign, err := outside.Create("run-foreign", cgroup.Limits{MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { foreign.Destroy(context.Background()) })
	foreignCmd := sleeperIn(foreign)
	held, err := parent.Create("run-held", cgroup.Limits{MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Destroy(context.Background()) })
	heldCmd := sleeperIn(held)
	stale, err := parent.Create("run-stale", cgroup.Limits{MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	staleCmd := sleeperIn(stale)
	stale.Forget() // its observer died

	data := t.TempDir()
	st, err := store.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	for id, cg := range map[string]string{"crafted": foreign.Path, "stale": stale.Path} {
		rec := testenv.Record(id, run.StateRunning, time.Now())
		rec.Cgroup = cg
		if err := st.SaveRecord(rec); err != nil {
			t.Fatal(err)
		}
	}
	m, err := runner.New(runner.Config{Store: st, Parent: parent, ProcFS: fs, Binary: "loadgen"})
	if err != nil {
		t.Logf("runner.New: %v", err)
	}
	t.Cleanup(m.Close)

	alive := func(cmd *exec.Cmd) bool {
		return cmd.ProcessState == nil && cmd.Process.Signal(syscall.Signal(0)) == nil
	}
	if !alive(foreignCmd) {
		t.Error("the process in the cgroup a record named outside the parent was killed")
	}
	if _, err := os.Stat(foreign.Path); err != nil {
		t.Errorf("the cgroup outside the parent was removed: %v", err)
	}
	if !alive(heldCmd) {
		t.Error("the process in a run cgroup a live owner holds was killed")
	}
	if _, err := os.Stat(held.Path); err != nil {
		t.Errorf("a run cgroup a live owner holds was removed: %v", err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- staleCmd.Wait() }()
	select {
	case <-waitErr:
	case <-ctx.Done():
		t.Error("the process in a stale run cgroup survived the sweep")
	}
	if _, err := os.Stat(filepath.Clean(stale.Path)); !os.IsNotExist(err) {
		t.Errorf("the stale run cgroup is still there: %v", err)
	}
	for _, id := range []string{"crafted", "stale"} {
		if rec, err := st.LoadRecord(id); err != nil || rec.State != run.StateAborted {
			t.Errorf("record %s: %s, %v; want aborted", id, rec.State, err)
		}
	}
}
