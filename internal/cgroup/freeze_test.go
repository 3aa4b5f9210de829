package cgroup_test

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// cpuSeconds is a process's user + system time, as /proc/<pid>/stat
// counts it: the kernel's own count of its running.
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	p, err := fs.ProcessStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return p.UserSeconds + p.SystemSeconds
}

// freezeGroup makes a freeze group under the test's own cgroup2 group and
// one child of it, removed when the test ends.
func freezeGroup(t *testing.T) (*cgroup.Cgroup, *cgroup.Cgroup) {
	t.Helper()
	g := testenv.UnifiedGroup(t, "freeze", true)
	ch, err := g.Child("consumer-00")
	if err != nil {
		t.Fatal(err)
	}
	return g, ch
}

// spinner starts a process that only burns CPU, in ch.
func spinner(t *testing.T, ch *cgroup.Cgroup) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := ch.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// ticksOver is how long pid runs for in d, in seconds of CPU (whole
// clock ticks).
func ticksOver(t *testing.T, pid int, d time.Duration) float64 {
	t.Helper()
	before := cpuSeconds(t, pid)
	time.Sleep(d)
	return cpuSeconds(t, pid) - before
}

func TestFreezeStopsAndThawResumes(t *testing.T) {
	_, ch := freezeGroup(t)
	cmd := spinner(t, ch)
	pid := cmd.Process.Pid
	if n := ticksOver(t, pid, 300*time.Millisecond); n == 0 {
		t.Fatalf("the spinner ran no tick in 300 ms before the freeze")
	}
	if err := ch.Freeze(context.Background()); err != nil {
		t.Fatal(err)
	}
	if frozen, err := ch.Frozen(); err != nil || !frozen {
		t.Fatalf("Frozen() = %v, %v after Freeze", frozen, err)
	}
	if n := ticksOver(t, pid, 500*time.Millisecond); n != 0 {
		t.Errorf("the frozen spinner ran %g s of CPU in 500 ms", n)
	}
	if err := ch.Thaw(); err != nil {
		t.Fatal(err)
	}
	if n := ticksOver(t, pid, 300*time.Millisecond); n == 0 {
		t.Errorf("the thawed spinner ran no tick in 300 ms")
	}
	if frozen, _ := ch.Frozen(); frozen {
		t.Errorf("Frozen() = true after Thaw")
	}
}

// A frozen process dies of SIGKILL: a consumer's PR_SET_PDEATHSIG when the
// observer dies leaves nothing frozen behind.
func TestFrozenProcessDiesOfSIGKILL(t *testing.T) {
	_, ch := freezeGroup(t)
	cmd := spinner(t, ch)
	if err := ch.Freeze(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the frozen spinner ended by %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the frozen spinner still lives 5 s after SIGKILL")
	}
}

func TestFreezeRefusesV1AndForeignGroups(t *testing.T) {
	v1 := &cgroup.Cgroup{Path: "/sys/fs/cgroup/memory/" + cgroup.Prefix + "x", V2: false}
	if err := v1.Freeze(context.Background()); err == nil || !strings.Contains(err.Error(), "cgroup v2") {
		t.Errorf("Freeze of a v1 group: %v, want an error naming cgroup v2", err)
	}
	foreign := &cgroup.Cgroup{Path: "/sys/fs/cgroup/unified/system.slice", V2: true}
	if err := foreign.Freeze(context.Background()); err == nil || !strings.Contains(err.Error(), "not made by thrashscope") {
		t.Errorf("Freeze of a foreign group: %v, want a refusal", err)
	}
	if _, err := (cgroup.Parent{Path: "/sys/fs/cgroup/memory"}).CreateFreezeGroup("x"); err == nil || !strings.Contains(err.Error(), "cgroup2") {
		t.Errorf("CreateFreezeGroup on a v1 parent: %v, want an error naming cgroup2", err)
	}
}
