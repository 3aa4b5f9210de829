package engine

import (
	"fmt"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// Governor is the policy stage of the pipeline, after the recorder; the
// flow runs it on a goroutine of its own, since acting (freezing a cgroup,
// paging a consumer out) and reading the consumers' swap may block. It
// shows the active run's policy the tick, as the policy sees a run, and
// the run carries out what it decides. A run under none is left alone.
type Governor struct {
	current func() Running // nil when no run is active
	procFS  procfs.FS
}

// Observe governs the active run on one tick.
func (g *Governor) Observe(_, tick *pipeline.Tick) {
	r := g.current()
	if r == nil || ended(r) || tick.Reading == nil || !tick.Reading.HasRates {
		return
	}
	rec := r.Record()
	needs := policy.NeedsOf(rec.Spec.Policy)
	if !needs.Ticks {
		return
	}
	usage, err := r.MemoryUsage()
	if err != nil {
		usage = rec.Spec.MemoryLimitBytes // unknown: as full as it can be
	}
	// Only a policy that sizes consumers by their own memory has the
	// stage read each consumer's status.
	var own func(int) (int64, int64, bool)
	if needs.OwnMemory {
		own = func(pid int) (int64, int64, bool) {
			p, err := g.procFS.Process(pid)
			if err != nil {
				return 0, 0, false // it ended meanwhile
			}
			return int64(p.OwnResidentBytes), int64(p.SwapBytes), true
		}
	}
	r.Govern(policyTick(tick, rec, usage, own))
}

// policyTick is the run at one tick as its policy sees it: the run's
// active consumers (started, not ended) with what the tick read of each,
// and the run cgroup's room. It reads nothing itself but, where ownOf is
// given, each consumer's own resident memory and swap, read together.
func policyTick(tick *pipeline.Tick, rec run.Record, usage int64, ownOf func(pid int) (resident, swap int64, ok bool)) policy.Tick {
	cur := tick.Reading
	var verdict indicators.Verdict
	if tick.Verdict != nil {
		verdict = *tick.Verdict
	}
	t := policy.Tick{
		Now:            cur.Time,
		Thrashing:      verdict.State == indicators.Thrashing,
		CPUBusyPercent: cur.Rates.CPUBusyPercent,
		LimitBytes:     rec.Spec.MemoryLimitBytes,
		FreeBytes:      max(0, rec.Spec.MemoryLimitBytes-usage),
	}
	read := make(map[int]*sampler.Process, len(cur.Processes))
	for i := range cur.Processes {
		read[cur.Processes[i].PID] = &cur.Processes[i]
	}
	for _, c := range rec.Consumers {
		if c.ActualStart == nil || c.ActualEnd != nil || c.Exit != "" || c.PID == 0 {
			continue
		}
		pc := policy.Consumer{Index: c.Index, DemandBytes: rec.Spec.SizeBytes, Since: *c.ActualStart}
		if p, ok := read[c.PID]; ok {
			pc.ResidentBytes = int64(p.ResidentBytes)
			if p.HasRates {
				pc.SwapInRate = p.Rates.MajFlt
			}
		}
		pc.HighFault = verdict.Processes[c.PID].HighFault
		if ownOf != nil {
			if res, swap, ok := ownOf(c.PID); ok {
				pc.OwnResidentBytes, pc.SwapBytes = res, swap
			}
		}
		t.Consumers = append(t.Consumers, pc)
	}
	return t
}

// PolicyLine says in one line what a run's policy is doing, for the live
// page and loadgen's progress line; empty under none.
func PolicyLine(s run.PolicyState) string {
	if !policy.NeedsOf(s.Policy).Ticks {
		return ""
	}
	line := fmt.Sprintf("policy %s: %d frozen, %d protected", s.Policy, s.Frozen, s.Protected)
	if s.Bins > 0 {
		line += fmt.Sprintf(", bin %d of %d running", s.Bin, s.Bins)
	}
	if s.Last == nil {
		return line + "; no action yet"
	}
	return line + fmt.Sprintf("; last: %s consumer %d (%s)", s.Last.Kind, s.Last.Consumer, s.Last.Why)
}
