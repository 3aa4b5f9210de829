package runner

import (
	"fmt"
	"time"

	"github.com/thrashscope/thrashscope/internal/procfs"
)

// A consumer that makes no progress while the run's policy does not hold it
// is no longer part of the experiment that was asked for: it keeps its
// memory, and a run of fixed work would wait for it until its 4 h bound,
// refusing every other run meanwhile. Once a second (drive's check) each
// live consumer the policy has not frozen is read from /proc:
//   - stopped (state T or t: SIGSTOP, SIGTSTP or a tracer from outside the
//     run) at stoppedChecks checks in a row fails the run at once;
//   - no write cycle, CPU time or page fault for stuckAfter fails it too,
//     whatever the cause. A consumer between cycles sleeps t_s (at most a
//     minute), and one waiting on a slow swap device still takes faults.
const (
	stoppedChecks = 2
	stuckAfter    = 5 * time.Minute
)

// progress is what the watch remembers of one consumer.
type progress struct {
	pid     int
	sig     [3]uint64 // write cycles, CPU ticks, page faults
	since   time.Time // when sig last changed
	stopped int       // checks in a row it was seen stopped
}

// watched is one consumer the watch looks at: index -1 is the consumer
// that runs alone first.
type watched struct {
	index, pid int
	cycles     uint64
	held       bool
}

// watchProgress checks the live consumers, as above, failing the run with
// the reason when one is stopped or stuck.
func (r *execution) watchProgress(now time.Time) {
	var ws []watched
	r.mu.Lock()
	for i, c := range r.rec.Consumers {
		// From its spawn: one stopped while it waits for its start would
		// never start.
		if r.procs[i] != nil && c.ActualEnd == nil && c.Exit == "" {
			ws = append(ws, watched{index: i, pid: c.PID, cycles: c.Cycles, held: r.levers.frozen(i)})
		}
	}
	if a := r.rec.Alone; a != nil && a.Exit == "" && a.ActualEnd == nil {
		ws = append(ws, watched{index: -1, pid: a.PID})
	}
	r.mu.Unlock()
	if r.progress == nil {
		r.progress = map[int]*progress{}
	}
	seen := make(map[int]bool, len(ws))
	for _, w := range ws {
		seen[w.index] = true
		p, err := r.cfg.ProcFS.ProcessStatFrom(&r.statFiles, w.pid)
		if err != nil {
			continue // it exited: its wait says how
		}
		st := r.progress[w.index]
		if st == nil || st.pid != w.pid || w.held {
			// Frozen by the policy, it is held, not stuck: its time
			// starts again when it is thawed.
			st = &progress{pid: w.pid, since: now}
			r.progress[w.index] = st
		}
		if reason := st.check(w, p, now); reason != "" {
			r.failNow(reason)
			return
		}
	}
	for i := range r.progress {
		if !seen[i] {
			delete(r.progress, i)
		}
	}
	r.statFiles.Sweep() // an exited consumer's file closes
}

// check updates what is known of a consumer from its /proc stat, and says
// why it fails the run, or "".
func (st *progress) check(w watched, p procfs.Process, now time.Time) string {
	who := fmt.Sprintf("consumer %d (pid %d)", w.index, w.pid)
	if w.index < 0 {
		who = fmt.Sprintf("the consumer that runs alone first (pid %d)", w.pid)
	}
	if w.held {
		return ""
	}
	if p.State == 'T' || p.State == 't' {
		st.stopped++
		if st.stopped >= stoppedChecks {
			return fmt.Sprintf("%s was stopped (state %c) by a signal or a tracer from outside the run (SIGSTOP, SIGTSTP, ptrace): it made no progress while holding its memory, so the run is no longer the one asked for", who, p.State)
		}
	} else {
		st.stopped = 0
	}
	sig := [3]uint64{w.cycles, uint64((p.UserSeconds + p.SystemSeconds) * 100), p.MinorFaults + p.MajorFaults}
	if sig != st.sig {
		st.sig, st.since = sig, now
		return ""
	}
	if d := now.Sub(st.since); d >= stuckAfter {
		return fmt.Sprintf("%s made no progress for %s (no write cycle, CPU time or page fault) while the run's policy was not holding it", who, d.Round(time.Second))
	}
	return ""
}
