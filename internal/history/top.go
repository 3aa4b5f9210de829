package history

import (
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

// Top is the latest sample's tracked processes, busiest first, with their
// rates over the interval before it.
type Top struct {
	Time time.Time // zero before the first sample with rates
	Rows []ProcessRow
	// Workloads are the busiest cgroups, busiest first; none without
	// per-cgroup counters.
	Workloads []WorkloadRow
}

// WorkloadRow is one watched workload: its cgroup and what its path says,
// its detector's state, and its rates over the interval.
type WorkloadRow struct {
	Cgroup, Unit, PodUID, ContainerID string
	State                             string
	MajorFaultsPerSecond              float64
	StallPercent                      float64 // summed over its tasks, % of one thread
	PSIFullPercent                    float64 // valid when HasPSI
	HasPSI, HasRates                  bool
	CurrentBytes, LimitBytes          int64 // -1 unread
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

// TopOf builds the process table of a tick, with the rates the sampler
// computed.
func TopOf(tick *pipeline.Tick) Top {
	cur := tick.Reading
	var verdict indicators.Verdict
	if tick.Verdict != nil {
		verdict = *tick.Verdict
	}
	t := Top{Time: cur.Time, Rows: make([]ProcessRow, 0, len(cur.Processes))}
	for _, p := range cur.Processes {
		pv := verdict.Processes[p.PID]
		row := ProcessRow{
			PID: p.PID, Comm: p.Comm,
			ResidentBytes: p.ResidentBytes, SwapBytes: p.SwapBytes,
			WorkingSetBytes: pv.WorkingSetBytes, HasWorkingSet: pv.HasWorkingSet,
			HighFault: pv.HighFault,
		}
		if p.HasRates {
			f := p.Rates.Faults
			row.HasRates = true
			row.AnonFaults, row.ShmemFaults, row.FileFaults, row.UnknownFaults = f[readout.Anon], f[readout.Shmem], f[readout.File], f[readout.Unknown]
			row.HasStall, row.StallPercent = p.Rates.HasStall, p.Rates.StallPercent
		}
		t.Rows = append(t.Rows, row)
	}
	for _, w := range tick.Workloads {
		row := WorkloadRow{
			Cgroup: w.Cgroup, Unit: w.Unit, PodUID: w.PodUID, ContainerID: w.ContainerID,
			State: indicators.StateNames[w.State], HasRates: w.HasRates,
			MajorFaultsPerSecond: w.MajorFaultsPerSecond, StallPercent: w.StallPercent,
			HasPSI: w.HasPSIRates, PSIFullPercent: w.PSIFullPercent,
			CurrentBytes: -1, LimitBytes: -1,
		}
		if w.HasKernel {
			row.CurrentBytes, row.LimitBytes = w.Kernel.CurrentBytes, w.Kernel.LimitBytes
		}
		t.Workloads = append(t.Workloads, row)
	}
	return t
}
