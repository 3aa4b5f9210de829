package runner_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// childNamed finds the process whose parent is ppid and whose comm is name.
func childNamed(ppid int, name string) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		open, end := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
		if open < 0 || end < open || string(b[open+1:end]) != name {
			continue
		}
		fields := strings.Fields(string(b[end+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(ppid) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
			return pid
		}
	}
	return 0
}

// A consumer stopped from outside (SIGSTOP) makes no progress while it
// holds its memory: the run fails at once with the reason, as for a
// SIGKILL, and nothing is left stopped, frozen or alive. The defect: a
// cycles run (bounded only by 4 h) stayed running with that consumer at
// 185 cycles, every POST got 409, and binpack kept freezing and thawing it.
func TestAConsumerStoppedFromOutsideFailsTheRun(t *testing.T) {
	for name, args := range map[string][]string{
		"none":    {"--preset=pair", "--scale=0.1", "--cycles=300"},
		"binpack": append(append([]string(nil), syn8Args...), "--policy=binpack"),
	} {
		t.Run(name, func(t *testing.T) {
			r := startLoadgenRun(t, args...)
			// A consumer of the run, once spawned (after the one alone).
			var pid int
			waitFor(t, 2*time.Minute, "consumer-01 to be spawned", func() bool {
				pid = childNamed(r.cmd.Process.Pid, run.ConsumerName(1))
				return pid != 0
			})
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			stoppedAt := time.Now()
			select {
			case <-r.exited:
			case <-time.After(60 * time.Second):
				syscall.Kill(pid, syscall.SIGCONT)
				t.Fatalf("the run went on 60 s after its consumer (pid %d) was stopped\n%s", pid, r.stderr.String())
			}
			t.Logf("the run ended %s after the consumer was stopped", time.Since(stoppedAt).Round(100*time.Millisecond))
			rec, _ := testenv.OnlyRecord(t, r.out)
			if rec.State != run.StateFailed || !strings.Contains(rec.Reason, "consumer 1 (pid "+strconv.Itoa(pid)+") was stopped (state T)") {
				t.Errorf("the run is %s: %q; want failed, naming the stopped consumer", rec.State, rec.Reason)
			}
			leftBehind(t, rec)
		})
	}
}
