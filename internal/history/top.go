package history

import (
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// Top is the latest sample's tracked processes, busiest first, with their
// rates over the interval before it.
type Top struct {
	Time time.Time // zero before the first sample with rates
	Rows []ProcessRow
}

// ProcessRow is one tracked process. Rates need the process in the sample
// before too; HasRates is false for one just come into the table.
type ProcessRow struct {
	PID  int
	Comm string
	// Major faults per second by kind: anon and shmem (from swap), file,
	// and unknown (procfs alone, or a fault the probe could not class).
	AnonFaults, ShmemFaults, FileFaults, UnknownFaults float64
	// StallPercent is the time in a memory stall over the interval, as
	// PSI counts it, in % of one thread; valid when HasStall.
	StallPercent float64
	HasStall     bool
	HasRates     bool

	ResidentBytes, SwapBytes uint64
	WorkingSetBytes          uint64 // valid when HasWorkingSet
	HasWorkingSet            bool
	HighFault                bool
}

// TopOf builds the process table of cur, with rates against prev (nil
// at first).
func TopOf(prevTick, curTick *pipeline.Tick) Top {
	cur := curTick.Reading
	var verdict indicators.Verdict
	if curTick.Verdict != nil {
		verdict = *curTick.Verdict
	}
	t := Top{Time: cur.Time, Rows: make([]ProcessRow, 0, len(cur.Processes))}
	before := map[int]*sampler.Process{}
	var secs float64
	if prevTick != nil {
		prev := prevTick.Reading
		secs = cur.Time.Sub(prev.Time).Seconds()
		for i := range prev.Processes {
			p := &prev.Processes[i]
			before[p.PID] = p
		}
	}
	for _, p := range cur.Processes {
		pv := verdict.Processes[p.PID]
		row := ProcessRow{
			PID: p.PID, Comm: p.Comm,
			ResidentBytes: p.ResidentBytes, SwapBytes: p.SwapBytes,
			WorkingSetBytes: pv.WorkingSetBytes, HasWorkingSet: pv.HasWorkingSet,
			HighFault: pv.HighFault,
		}
		// A reused pid is another process: no rates against the old one.
		if b, ok := before[p.PID]; ok && b.StartTicks == p.StartTicks && secs > 0 {
			row.HasRates = true
			row.AnonFaults = perSecond(p.MajorFaults[probe.Anon], b.MajorFaults[probe.Anon], secs)
			row.ShmemFaults = perSecond(p.MajorFaults[probe.Shmem], b.MajorFaults[probe.Shmem], secs)
			row.FileFaults = perSecond(p.MajorFaults[probe.File], b.MajorFaults[probe.File], secs)
			row.UnknownFaults = perSecond(p.MajorFaults[probe.Unknown], b.MajorFaults[probe.Unknown], secs)
			if p.HasStall && b.HasStall {
				row.HasStall = true
				row.StallPercent = 100 * max(p.Stall.Total().Seconds()-b.Stall.Total().Seconds(), 0) / secs
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func perSecond(now, before uint64, secs float64) float64 {
	if now < before {
		return 0 // the probe's counters restarted
	}
	return float64(now-before) / secs
}
