package engine

import (
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
)

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
	live := make(map[int]bool, len(st.LivePIDs))
	for _, pid := range st.LivePIDs {
		live[pid] = true
	}
	consumers := map[int]run.ConsumerRecord{}
	for _, c := range rec.Consumers {
		if live[c.PID] {
			consumers[c.PID] = c
		}
	}
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

// consumerDemand is TPF's memory allocation demand of consumer c at t: its
// S from the moment it began allocating until it finished, 0 before and
// after. The fill preset's one consumer demands what it has filled so far.
func consumerDemand(rec run.Record, c run.ConsumerRecord, t time.Time, p run.Progress) int64 {
	if c.ActualStart == nil || t.Before(*c.ActualStart) || (c.ActualEnd != nil && !t.Before(*c.ActualEnd)) {
		return 0
	}
	if rec.Spec.Shape() == run.ShapeFill {
		return p.DemandBytes
	}
	return rec.Spec.SizeBytes
}
