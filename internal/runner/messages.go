// Cycle statistics: what each consumer's messages and cycle-board entries
// add to its record (starts, cycles, durations, locks, fill chunks), the
// slowest cycle of the last two seconds, and the makespan.

package runner

import (
	"fmt"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/stats"
	"github.com/thrashscope/thrashscope/internal/store"
)

type chunkSample struct {
	seconds           float64
	memFree, swapFree uint64
}

// cycleStats are a run's cycle statistics: the slowest cycle in the last
// two seconds, and the fill preset's chunk samples. execution.mu guards them;
// they read no clock and no process, so their tests need neither.
type cycleStats struct {
	// slowest[0] is the slowest cycle in the current second, [1] in the
	// one before.
	slowest   [2]time.Duration
	slowestAt int64           // the unix second slowest[0] belongs to
	chunks    [][]chunkSample // per chunk, one sample a repeat; nil unless fill
}

// rotate moves to now's second's bucket.
func (s *cycleStats) rotate(now time.Time) {
	sec := now.Unix()
	switch {
	case sec == s.slowestAt:
	case sec == s.slowestAt+1:
		s.slowest = [2]time.Duration{0, s.slowest[0]}
	default:
		s.slowest = [2]time.Duration{}
	}
	s.slowestAt = sec
}

// cycle counts a cycle of d that ended at now.
func (s *cycleStats) cycle(now time.Time, d time.Duration) {
	s.rotate(now)
	s.slowest[0] = max(s.slowest[0], d)
}

// slowestCycle is the slowest cycle in the second of now and the one
// before.
func (s *cycleStats) slowestCycle(now time.Time) time.Duration {
	s.rotate(now)
	return max(s.slowest[0], s.slowest[1])
}

// chunk records one repeat's fill of chunk i; one out of range is dropped.
func (s *cycleStats) chunk(i int, c chunkSample) {
	if i >= 0 && i < len(s.chunks) {
		s.chunks[i] = append(s.chunks[i], c)
	}
}

// chunksDone is how many chunk fills were recorded.
func (s *cycleStats) chunksDone() int {
	n := 0
	for _, rep := range s.chunks {
		n += len(rep)
	}
	return n
}

// fillRows are the fill experiment's table: per chunk, the mean and
// standard deviation of its fill time over the repeats, with the host's
// free memory and swap when it was filled. Nil for other presets.
func (s *cycleStats) fillRows(chunkBytes int64) []store.FillRow {
	if s.chunks == nil {
		return nil
	}
	rows := []store.FillRow{}
	for i, reps := range s.chunks {
		if len(reps) == 0 {
			continue
		}
		var secs []float64
		var free, swap float64
		for _, c := range reps {
			secs = append(secs, c.seconds)
			free += float64(c.memFree)
			swap += float64(c.swapFree)
		}
		mean, sd := stats.MeanSD(secs) // never empty here
		n := float64(len(reps))
		rows = append(rows, store.FillRow{
			Chunk: i, AllocatedBytes: int64(i+1) * chunkBytes, Repeats: len(reps),
			MeanSeconds: mean, SDSeconds: sd, MemoryFreeBytes: free / n, SwapFreeBytes: swap / n,
		})
	}
	return rows
}

// applyMessage is what a consumer's message adds to its record c: a start,
// a cycle, its end (with lateness past t_f, and the run time and slowdown
// of a run of fixed work against the consumer that ran alone). It reports
// whether the record changed in a way worth saving. The other kinds are
// the execution's (apply).
func applyMessage(c *run.ConsumerRecord, m consumer.Message, traits run.Traits, alone *run.AloneRecord) (changed bool) {
	switch m.Kind {
	case consumer.KindStarted:
		t := time.Unix(0, m.A)
		c.ActualStart = &t
		return true
	case consumer.KindCycle:
		c.Cycles++
	case consumer.KindDone:
		t := time.Unix(0, m.A)
		c.ActualEnd = &t
		c.Cycles = uint64(m.B)
		if late := t.Sub(c.PlannedEnd); late > 0 && traits.Scheduled {
			c.LatenessSeconds = late.Seconds()
		}
		if traits.Work && c.ActualStart != nil {
			c.RunSeconds = t.Sub(*c.ActualStart).Seconds()
			if alone != nil && alone.RunSeconds > 0 && !m.Terminated() {
				c.Slowdown = c.RunSeconds / alone.RunSeconds
			}
		}
		return true
	}
	return false
}

// apply takes one message of consumer i: its record (applyMessage), the
// cycle statistics, and what the levers and the log need.
func (r *execution) apply(i int, rep consumer.Message) {
	r.mu.Lock()
	if rep.Kind == consumer.KindDone {
		r.takeLocked(i) // the board's last, before the count the message gives
	}
	c := &r.rec.Consumers[i]
	changed := applyMessage(c, rep, r.traits, r.rec.Alone)
	switch rep.Kind {
	case consumer.KindCycle:
		d := time.Duration(rep.B)
		r.cycles.cycle(r.cfg.Now(), d)
		r.durations.Observe(d)
	case consumer.KindChunk:
		_, chunk := rep.Chunk()
		mem, _ := r.cfg.ProcFS.Memory()
		r.cycles.chunk(chunk, chunkSample{seconds: time.Duration(rep.B).Seconds(), memFree: mem.AvailableBytes, swapFree: mem.SwapFreeBytes})
	case consumer.KindRegion:
		r.levers.mapped(i, uintptr(rep.A), uintptr(rep.B))
	case consumer.KindLocked:
		if rep.B != 0 {
			r.cfg.Logger.Warn("a consumer could not lock or unlock its region", "run", r.cfg.ID, "consumer", i, "err", syscall.Errno(rep.B).Error())
		}
	}
	pid := c.PID
	r.mu.Unlock()
	if rep.Kind == consumer.KindDone {
		r.levers.finished(i)
	}
	if rep.Kind == consumer.KindDone && rep.Terminated() {
		// The run cancels itself before it signals its consumers, so a
		// SIGTERM (or SIGINT) before that came from someone else.
		r.failNow(fmt.Sprintf("consumer %d (pid %d) was stopped by a SIGTERM or SIGINT the run did not send", i, pid))
	}
	if changed {
		r.changes.Add(1)
	}
}

// takeCycles takes every consumer's newly logged cycles off the board.
func (r *execution) takeCycles() {
	if r.board == nil {
		return
	}
	for i := range r.procs {
		r.mu.Lock()
		r.takeLocked(i)
		r.mu.Unlock()
	}
}

// takeLocked counts consumer i's cycles logged since the last take, and
// keeps the slowest and their durations. Called with r.mu held.
func (r *execution) takeLocked(i int) {
	if r.board == nil {
		return
	}
	now := r.cfg.Now()
	n := r.board.Take(i, func(_ int64, d time.Duration) {
		r.cycles.cycle(now, d)
		r.durations.Observe(d)
	})
	r.rec.Consumers[i].Cycles += n
}

// CycleDurations are the durations of the run's write cycles so far.
func (r *execution) CycleDurations() run.CycleHistogram {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.durations.Clone()
}

// Changes counts the changes of the record so far: one more than when it
// was last saved means it is to be saved again.
func (r *execution) Changes() uint64 { return r.changes.Load() }

// FillRows are the fill experiment's table (see cycleStats.fillRows).
func (r *execution) FillRows() []store.FillRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cycles.fillRows(r.cfg.Spec.SizeBytes)
}
