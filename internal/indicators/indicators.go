package indicators

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// Fault kinds the detector counts, as --detector.fault-kind.
const (
	CountAnon = "anon" // TPF counted faults served from swap only: anon and shmem
	CountAll  = "all"
)

// Config configures the indicators.
type Config struct {
	Detector  DetectorConfig
	FaultKind string
	// WorkingSets are the working-set scan's estimates; nil without it.
	WorkingSets WorkingSets
	Logger      *slog.Logger
}

// WorkingSets is what the indicators read of the working-set scan
// (*WorkingSet): each process's estimate, and the scan's cost.
type WorkingSets interface {
	Estimate(pid int) (WorkingSetEstimate, bool)
	Stats() WorkingSetStats
}

// Scope is the active run's consumers and cgroup limit: while a run is
// active their working sets are measured against that limit, not the
// host. The zero Scope is no run.
type Scope struct {
	PIDs       []int
	LimitBytes int64
}

// Verdict is the indicators' judgement of one reading: the detector's
// state, the overcommit ratio, and each process's working set and
// high-fault membership.
type Verdict struct {
	State          int // Normal, Monitoring or Thrashing
	HighFaultCount int
	Transitions    [3]uint64 // cumulative, by state entered (indexed as State)
	// Transition is the one this reading caused, nil when none.
	Transition         *Transition
	WorkingSetRatio    float64 // valid when HasWorkingSetRatio
	HasWorkingSetRatio bool
	// WorkingSetScanSeconds is the working-set estimator's own cost so far.
	WorkingSetScanSeconds float64
	// Processes holds the reading's processes, by pid.
	Processes map[int]ProcessVerdict
}

// ProcessVerdict is what the indicators say of one process.
type ProcessVerdict struct {
	// The working set over the last τ in wall-clock time and in the
	// process's own time (the demand), when HasWorkingSet.
	WorkingSetBytes uint64
	DemandBytes     uint64
	HasWorkingSet   bool
	// FootprintBytes is the most the demand can be (what it holds, its
	// shared files' pages out too), and Saturated says the demand is a
	// floor: the thrash took the most of its window the estimator
	// scales by (WorkingSetEstimate.Saturated).
	FootprintBytes uint64
	Saturated      bool
	HighFault      bool
}

// Indicators judge each reading: the working sets, the high-fault set, the
// detector's state and the overcommit ratio.
type Indicators struct {
	cfg        Config
	det        *Detector
	warnedKind bool
}

// New builds the indicators.
func New(cfg Config) (*Indicators, error) {
	if err := cfg.Detector.Validate(); err != nil {
		return nil, err
	}
	if cfg.FaultKind != CountAnon && cfg.FaultKind != CountAll {
		return nil, fmt.Errorf("--detector.fault-kind=%q: want anon (swap faults, as TPF) or all", cfg.FaultKind)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Indicators{cfg: cfg, det: NewDetector(cfg.Detector)}, nil
}

// counted is the rate of major faults the detector counts for a process:
// with --detector.fault-kind=anon, TPF's swap-ins, that is anon and shmem.
// On procfs alone the kind is unknown and every major fault counts.
func (ind *Indicators) counted(p *sampler.Process, withProbe bool) float64 {
	if !withProbe {
		if ind.cfg.FaultKind == CountAnon && !ind.warnedKind {
			ind.warnedKind = true
			ind.cfg.Logger.Warn("the detector counts every major fault: on procfs alone anon and file faults cannot be told apart")
		}
		return p.Rates.Faults[readout.Unknown]
	}
	if ind.cfg.FaultKind == CountAll {
		return p.Rates.Faults.Total()
	}
	return p.Rates.Faults.SwapIns()
}

// Judge returns the verdict on cur, given the reading before it (nil at
// first) and the active run's scope. One caller at a time: the detector
// steps once per call.
func (ind *Indicators) Judge(prev, cur *sampler.Reading, scope Scope) Verdict {
	withProbe := len(cur.Probes) > 0
	v := Verdict{Processes: make(map[int]ProcessVerdict, len(cur.Processes))}
	in := Input{FaultRates: make(map[int]float64, len(cur.Processes))}
	for i := range cur.Processes {
		p := &cur.Processes[i]
		if p.HasRates {
			in.FaultRates[p.PID] = ind.counted(p, withProbe)
		}
		var pv ProcessVerdict
		if ind.cfg.WorkingSets != nil {
			e, ok := ind.cfg.WorkingSets.Estimate(p.PID)
			pv.WorkingSetBytes, pv.DemandBytes, pv.HasWorkingSet = e.Bytes, e.DemandBytes, ok
			pv.FootprintBytes, pv.Saturated = e.Footprint(), e.Saturated
		}
		v.Processes[p.PID] = pv
	}
	if cur.HasRates {
		in.CPUBusy, in.Evicted = cur.Rates.CPUBusyPercent, cur.Rates.EvictedPagesPerSecond
		in.PSIFull, in.HasPSI = cur.Rates.PressureFullPercent, cur.Pressure != nil && prev.Pressure != nil
		if tr := ind.det.Step(in); tr != nil {
			tr.At, tr.Names = cur.Time, names(tr.HighFault, cur)
			ind.log(*tr)
			v.Transition = tr
		}
	}
	for pid, pv := range v.Processes {
		pv.HighFault = ind.det.HighFault(pid)
		v.Processes[pid] = pv
	}
	v.State = ind.det.State()
	v.HighFaultCount = ind.det.HighCount()
	v.Transitions = ind.det.Transitions()
	v.WorkingSetRatio, v.HasWorkingSetRatio = ratio(cur, v.Processes, scope)
	if ind.cfg.WorkingSets != nil {
		v.WorkingSetScanSeconds = ind.cfg.WorkingSets.Stats().ScanSeconds
	}
	return v
}

// ratio is Denning's overcommit: the tracked processes' demand (their
// working sets in their own time) over the memory they have. During a run,
// the consumers' against the cgroup limit; else every tracked process's
// against what they hold plus what is free.
func ratio(cur *sampler.Reading, procs map[int]ProcessVerdict, scope Scope) (float64, bool) {
	if scope.LimitBytes > 0 && len(scope.PIDs) > 0 {
		var ws uint64
		known := false
		for _, pid := range scope.PIDs {
			if pv, ok := procs[pid]; ok && pv.HasWorkingSet {
				ws += pv.DemandBytes
				known = true
			}
		}
		return float64(ws) / float64(scope.LimitBytes), known
	}
	var ws, rss uint64
	known := false
	for _, p := range cur.Processes {
		if pv := procs[p.PID]; pv.HasWorkingSet {
			ws += pv.DemandBytes
			rss += p.ResidentBytes
			known = true
		}
	}
	avail := float64(cur.Memory.AvailableBytes + rss)
	if !known || avail <= 0 {
		return 0, false
	}
	return float64(ws) / avail, true
}

// names are the processes' "comm/pid", for the log and the run record.
func names(pids []int, cur *sampler.Reading) []string {
	comm := make(map[int]string, len(cur.Processes))
	for _, p := range cur.Processes {
		comm[p.PID] = p.Comm
	}
	out := make([]string, 0, len(pids))
	for _, pid := range pids {
		out = append(out, comm[pid]+"/"+strconv.Itoa(pid))
	}
	return out
}

// log logs a transition with the processes involved.
func (ind *Indicators) log(tr Transition) {
	level := slog.LevelInfo
	if tr.To == Thrashing {
		level = slog.LevelWarn
	}
	ind.cfg.Logger.Log(context.Background(), level, "thrash detector: "+StateNames[tr.From]+" → "+StateNames[tr.To],
		"why", tr.Why, "high_fault", strings.Join(tr.Names, " "))
}
