// Cycle statistics: what each consumer's messages and cycle-board entries
// add to its record (starts, cycles, durations, locks, fill chunks), the
// slowest cycle of the last two seconds, and the makespan.

package master

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

// rotateSlowest moves to the current second's bucket. Called with r.mu held.
func (r *Master) rotateSlowest(now time.Time) {
	sec := now.Unix()
	switch {
	case sec == r.slowestAt:
	case sec == r.slowestAt+1:
		r.slowest = [2]time.Duration{0, r.slowest[0]}
	default:
		r.slowest = [2]time.Duration{}
	}
	r.slowestAt = sec
}

func (r *Master) apply(i int, rep consumer.Message) {
	changed := false
	var cycles []time.Duration
	defer func() { r.observe(i, cycles) }()
	r.mu.Lock()
	c := &r.rec.Consumers[i]
	switch rep.Kind {
	case consumer.KindStarted:
		t := time.Unix(0, rep.A)
		c.ActualStart = &t
		changed = true
	case consumer.KindCycle:
		c.Cycles++
		d := time.Duration(rep.B)
		r.rotateSlowest(r.cfg.Now())
		r.slowest[0] = max(r.slowest[0], d)
		defer r.cfg.OnCycle(i, d)
	case consumer.KindChunk:
		_, chunk := rep.Chunk()
		if chunk < len(r.chunks) {
			var free, swap uint64
			if r.cfg.HostMemory != nil {
				free, swap = r.cfg.HostMemory()
			}
			r.chunks[chunk] = append(r.chunks[chunk], chunkSample{seconds: time.Duration(rep.B).Seconds(), memFree: free, swapFree: swap})
		}
	case consumer.KindRegion:
		r.gov.levers[i].region = [2]uintptr{uintptr(rep.A), uintptr(rep.B)}
	case consumer.KindLocked:
		if rep.B != 0 {
			r.cfg.Logger.Warn("a consumer could not lock or unlock its region", "run", r.cfg.ID, "consumer", i, "err", syscall.Errno(rep.B).Error())
		}
	case consumer.KindDone:
		cycles = r.takeLocked(i, cycles)
		t := time.Unix(0, rep.A)
		c.ActualEnd = &t
		c.Cycles = uint64(rep.B)
		if late := t.Sub(c.PlannedEnd); late > 0 && r.cfg.Spec.Preset != run.PresetFill {
			c.LatenessSeconds = late.Seconds()
		}
		if r.cfg.Spec.Cycles > 0 && c.ActualStart != nil {
			c.RunSeconds = t.Sub(*c.ActualStart).Seconds()
			if a := r.rec.Alone; a != nil && a.RunSeconds > 0 && !rep.Terminated() {
				c.Slowdown = c.RunSeconds / a.RunSeconds
			}
		}
		changed = true
	}
	pid := c.PID
	r.mu.Unlock()
	if rep.Kind == consumer.KindDone && rep.Terminated() {
		// The run cancels itself before it signals its consumers, so a
		// SIGTERM (or SIGINT) before that came from someone else.
		r.failNow(fmt.Sprintf("consumer %d (pid %d) was stopped by a SIGTERM or SIGINT the run did not send", i, pid))
	}
	if changed {
		r.cfg.OnChange()
	}
}

// takeCycles takes every consumer's newly logged cycles off the board.
func (r *Master) takeCycles() {
	if r.board == nil {
		return
	}
	for i := range r.procs {
		r.mu.Lock()
		cycles := r.takeLocked(i, nil)
		r.mu.Unlock()
		r.observe(i, cycles)
	}
}

// takeLocked counts consumer i's cycles logged since the last take, keeps
// the slowest, and appends their durations to ds for observe. Called with
// r.mu held.
func (r *Master) takeLocked(i int, ds []time.Duration) []time.Duration {
	if r.board == nil {
		return ds
	}
	r.rotateSlowest(r.cfg.Now())
	n := r.board.Take(i, func(_ int64, d time.Duration) {
		r.slowest[0] = max(r.slowest[0], d)
		ds = append(ds, d)
	})
	r.rec.Consumers[i].Cycles += n
	return ds
}

// observe passes cycle durations to OnCycle, outside r.mu.
func (r *Master) observe(i int, ds []time.Duration) {
	for _, d := range ds {
		r.cfg.OnCycle(i, d)
	}
}

// makespan is the time from the first consumer's start to the last one's
// end; 0 unless every consumer started and ended.
func makespan(cs []run.ConsumerRecord) float64 {
	var first, last time.Time
	for _, c := range cs {
		if c.ActualStart == nil || c.ActualEnd == nil {
			return 0
		}
		if first.IsZero() || c.ActualStart.Before(first) {
			first = *c.ActualStart
		}
		if c.ActualEnd.After(last) {
			last = *c.ActualEnd
		}
	}
	return last.Sub(first).Seconds()
}

// FillRows are the fill experiment's table: per chunk, the mean and
// standard deviation of its fill time over the repeats, with the host's
// free memory and swap when it was filled. Nil for other presets.
func (r *Master) FillRows() []store.FillRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.chunks == nil {
		return nil
	}
	rows := []store.FillRow{}
	for i, reps := range r.chunks {
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
			Chunk: i, AllocatedBytes: int64(i+1) * r.cfg.Spec.SizeBytes, Repeats: len(reps),
			MeanSeconds: mean, SDSeconds: sd, MemoryFreeBytes: free / n, SwapFreeBytes: swap / n,
		})
	}
	return rows
}
