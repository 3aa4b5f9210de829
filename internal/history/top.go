package history

import (
	"time"

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
	// Major faults per second by kind: anon (from swap), file, and
	// unknown (procfs alone, or a fault the probe could not class).
	AnonFaults, FileFaults, UnknownFaults float64
	// StallPercent is off-CPU time in a memory stall over the interval,
	// in % of one thread; valid when HasStall.
	StallPercent float64
	HasStall     bool
	HasRates     bool

	ResidentBytes, SwapBytes uint64
	WorkingSetBytes          uint64 // valid when HasWorkingSet
	HasWorkingSet            bool
	HighFault                bool
}

// TopOf builds the process table of cur, with rates against prev.
func TopOf(prev, cur *sampler.Sample) Top {
	t := Top{Time: cur.Time, Rows: make([]ProcessRow, 0, len(cur.Processes))}
	before := map[int]*sampler.Process{}
	var secs float64
	if prev != nil {
		secs = cur.Time.Sub(prev.Time).Seconds()
		for i := range prev.Processes {
			p := &prev.Processes[i]
			before[p.PID] = p
		}
	}
	for _, p := range cur.Processes {
		row := ProcessRow{
			PID: p.PID, Comm: p.Comm,
			ResidentBytes: p.ResidentBytes, SwapBytes: p.SwapBytes,
			WorkingSetBytes: p.WorkingSetBytes, HasWorkingSet: p.HasWorkingSet,
			HighFault: p.HighFault,
		}
		// A reused pid is another process: no rates against the old one.
		if b, ok := before[p.PID]; ok && b.StartTicks == p.StartTicks && secs > 0 {
			row.HasRates = true
			row.AnonFaults = perSecond(p.MajorFaults[0], b.MajorFaults[0], secs)
			row.FileFaults = perSecond(p.MajorFaults[1], b.MajorFaults[1], secs)
			row.UnknownFaults = perSecond(p.MajorFaults[2], b.MajorFaults[2], secs)
			if p.HasStall && b.HasStall {
				row.HasStall = true
				row.StallPercent = 100 * max(p.StallSeconds-b.StallSeconds, 0) / secs
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
