package procfs

import (
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// The run delay of a process grows while more processes are runnable than
// there are CPUs: twice as many spinning shells as CPUs, for 300 ms, each
// waiting for a CPU about half of it.
func TestRunDelay(t *testing.T) {
	fs, err := NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for range 2 * runtime.NumCPU() {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}()
	pid := cmds[0].Process.Pid
	before, err := fs.RunDelay(pid)
	if err != nil {
		t.Fatalf("RunDelay(%d): %v (a kernel without CONFIG_SCHED_INFO has no schedstat)", pid, err)
	}
	time.Sleep(300 * time.Millisecond)
	after, err := fs.RunDelay(pid)
	if err != nil {
		t.Fatal(err)
	}
	if d := after - before; d < 60*time.Millisecond || d > 300*time.Millisecond {
		t.Errorf("run delay grew %s over 300 ms among %d spinning shells on %d CPUs, want about half of it (60 to 300 ms)", d, len(cmds), runtime.NumCPU())
	}
}

// BenchmarkRunDelay reads this process's threads' run delay.
func BenchmarkRunDelay(b *testing.B) {
	fs, err := NewFS("/proc")
	if err != nil {
		b.Fatal(err)
	}
	pid := os.Getpid()
	for b.Loop() {
		if _, err := fs.RunDelay(pid); err != nil {
			b.Fatal(err)
		}
	}
}
