package runner

import (
	"fmt"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/store"
)

// Source is the pipeline's first input: the active run's scope.
type Source struct {
	current func() Running // nil when no run is active
}

// Scope is the active run's live consumers, tracked whatever their
// activity, and its cgroup limit, for the working-set ratio; the zero Scope
// when no run is active.
func (s Source) Scope() indicators.Scope {
	r := s.current()
	if r == nil {
		return indicators.Scope{}
	}
	return indicators.Scope{PIDs: r.PIDs(), LimitBytes: r.Record().Spec.MemoryLimitBytes}
}

// Recorder is the run recorder, a sink of the pipeline: it adds each tick
// to the active run's tables (samples.csv, processes.csv) and its detector
// transitions to the run record, and has the tables and the record saved
// every few rows, off the pipeline's goroutine.
type Recorder struct {
	current func() *active // nil when no run is active
	save    func(a *active, withTables bool)
}

// Observe records one tick.
func (r *Recorder) Observe(_, tick *pipeline.Tick) {
	a := r.current()
	if a == nil {
		return
	}
	var verdict indicators.Verdict
	if tick.Verdict != nil {
		verdict = *tick.Verdict
	}
	if tr := verdict.Transition; tr != nil {
		a.run.AddTransition(run.Transition{At: tr.At, To: indicators.StateNames[tr.To], Processes: tr.Names})
	}
	if tick.Reading == nil || !tick.Reading.HasRates {
		return
	}
	st := runState{Record: a.run.Record(), Progress: a.run.Progress(), LivePIDs: a.run.PIDs(), CgroupUsageBytes: -1}
	if u, err := a.run.MemoryUsage(); err == nil {
		st.CgroupUsageBytes = u
	}
	row, procRows := rowsOf(tick, st)
	a.processes.AppendSample(procRows)
	a.table.Append(row)
	a.unsaved++
	a.sinceRec++
	// A change of the record (a consumer started or ended) is saved with
	// a later sample, off the run's goroutines: a save syncs to disk, and
	// 25 consumers starting a second apart need one save a second, not 25.
	changes := a.run.Changes()
	switch {
	case a.unsaved >= saveEvery:
		a.unsaved, a.sinceRec, a.savedChanges = 0, 0, changes
		r.save(a, true)
	case a.sinceRec >= recordEvery && changes != a.savedChanges:
		a.sinceRec, a.savedChanges = 0, changes
		r.save(a, false)
	}
}

// runState is what the recorder knows of the active run at a tick.
type runState struct {
	Record   run.Record
	Progress run.Progress
	// LivePIDs are the consumers running now; a consumer's pid is recorded
	// only while it lives (a pid reused after it ended is another process).
	LivePIDs []int
	// CgroupUsageBytes is the run cgroup's usage; -1 when it could not be
	// read (samples.csv then says 0, as it always has).
	CgroupUsageBytes int64
}

// rowsOf turns one tick, which must have rates, into the active run's rows:
// a line of samples.csv and one line of processes.csv per live consumer
// the tick tracked. It reads nothing: the recorder's logic, tested on
// fixtures.
func rowsOf(tick *pipeline.Tick, st runState) (store.Row, []store.ProcessRow) {
	cur := tick.Reading
	var verdict indicators.Verdict
	if tick.Verdict != nil {
		verdict = *tick.Verdict
	}
	rec, p := st.Record, st.Progress
	row := store.Row{
		ElapsedSeconds:       cur.Time.Sub(rec.StartedAt).Seconds(),
		Host:                 cur.Rates.Host,
		MemoryAvailableBytes: cur.Memory.AvailableBytes,
		SwapFreeBytes:        cur.Memory.SwapFreeBytes,
		ConsumersActive:      p.Active,
		ConsumersPlanned:     p.Planned,
		DemandBytes:          p.DemandBytes,
		CgroupUsageBytes:     max(st.CgroupUsageBytes, 0),
		ConsumerStallPercent: store.Unknown,
	}
	consumers := liveConsumers(rec, st.LivePIDs)
	var stall float64
	hasStall := false
	var procRows []store.ProcessRow
	for _, pr := range cur.Processes {
		c, ok := consumers[pr.PID]
		if !ok {
			continue
		}
		prow := store.ProcessRow{
			ElapsedSeconds: row.ElapsedSeconds, Consumer: c.Index, PID: pr.PID, Comm: pr.Comm,
			DemandBytes:   consumerDemand(rec, c, cur.Time, p),
			ResidentBytes: int64(pr.ResidentBytes), SwapBytes: int64(pr.SwapBytes),
			WorkingSetBytes: store.Unknown, MajorFaultsPerSecond: store.Unknown, StallPercent: store.Unknown,
		}
		if pv := verdict.Processes[pr.PID]; pv.HasWorkingSet {
			prow.WorkingSetBytes = int64(pv.WorkingSetBytes)
		}
		// maj_flt, read for every tracked process with or without BPF.
		if pr.HasRates {
			prow.MajorFaultsPerSecond = pr.Rates.MajFlt
		}
		if pr.HasStall {
			hasStall = true
			if pr.HasRates && pr.Rates.HasStall {
				prow.StallPercent = pr.Rates.StallPercent
				stall += pr.Rates.StallPercent
			}
		}
		procRows = append(procRows, prow)
	}
	if hasStall {
		row.ConsumerStallPercent = stall // the consumers' stall shares add up
	}
	return row, procRows
}

// liveConsumers are the run's consumers running now, by pid: a consumer's
// pid is its own only while it lives.
func liveConsumers(rec run.Record, pids []int) map[int]run.ConsumerRecord {
	live := make(map[int]bool, len(pids))
	for _, pid := range pids {
		live[pid] = true
	}
	consumers := map[int]run.ConsumerRecord{}
	for _, c := range rec.Consumers {
		if live[c.PID] {
			consumers[c.PID] = c
		}
	}
	return consumers
}

// consumerDemand is TPF's memory allocation demand of consumer c at t: its
// S from the moment it began allocating until it finished, 0 before and
// after. The fill preset's one consumer demands what it has filled so far.
func consumerDemand(rec run.Record, c run.ConsumerRecord, t time.Time, p run.Progress) int64 {
	if c.ActualStart == nil || t.Before(*c.ActualStart) || (c.ActualEnd != nil && !t.Before(*c.ActualEnd)) {
		return 0
	}
	if rec.Spec.Traits().Chunks {
		return p.DemandBytes
	}
	return rec.Spec.SizeBytes
}

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
	if s.State != "" {
		line += ", " + s.State
	}
	if s.Last == nil {
		return line + "; no action yet"
	}
	return line + fmt.Sprintf("; last: %s consumer %d (%s)", s.Last.Kind, s.Last.Consumer, s.Last.Why)
}
