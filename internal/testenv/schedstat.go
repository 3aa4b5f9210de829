package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ThreadTimes is what the scheduler counted of a process's threads
// (/proc/<pid>/task/*/schedstat): the time they ran and the time they
// waited on a run queue. What is left of a span of wall time, for a
// process with one busy thread, is the time that thread was blocked.
type ThreadTimes struct {
	Ran, Waited time.Duration
	// Busiest is the time the thread that ran most ran (of a difference,
	// the thread that ran most in between): a process's busy thread, the
	// one a test's work runs on, where Ran counts the runtime's too.
	Busiest time.Duration
	ran     map[string]time.Duration // by thread id
}

// Sub is t minus earlier.
func (t ThreadTimes) Sub(earlier ThreadTimes) ThreadTimes {
	d := ThreadTimes{Ran: t.Ran - earlier.Ran, Waited: t.Waited - earlier.Waited}
	for tid, ran := range t.ran {
		d.Busiest = max(d.Busiest, ran-earlier.ran[tid])
	}
	return d
}

// Blocked is what is left of wall once t's running and waiting are taken
// out: a lower bound of the time its busiest thread spent blocked.
func (t ThreadTimes) Blocked(wall time.Duration) time.Duration {
	return max(0, wall-t.Ran-t.Waited)
}

// SchedTimes sums the schedstat of every thread of pid.
func SchedTimes(t testing.TB, pid int) ThreadTimes {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("no schedstat for pid %d (%v): the kernel needs CONFIG_SCHED_INFO", pid, err)
	}
	sum := ThreadTimes{ran: map[string]time.Duration{}}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended meanwhile
		}
		var ran, waited, slices uint64
		if _, err := fmt.Sscan(string(b), &ran, &waited, &slices); err != nil {
			t.Fatalf("%s: %q: %v", f, b, err)
		}
		sum.Ran += time.Duration(ran)
		sum.Waited += time.Duration(waited)
		sum.ran[filepath.Base(filepath.Dir(f))] = time.Duration(ran)
		sum.Busiest = max(sum.Busiest, time.Duration(ran))
	}
	return sum
}
