package indicators

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/probe"
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
	// WorkingSet returns a process's working set, when it is measured.
	WorkingSet func(pid int) (WorkingSetEstimate, bool)
	// ScanSeconds is the working-set estimator's cost so far.
	ScanSeconds func() float64
	// Scope returns the active run's consumers and cgroup limit, and false
	// when no run is active: their working sets are then measured against
	// that limit, not the host.
	Scope func() (pids []int, limitBytes int64, ok bool)
	// OnTransition hears every detector transition (the active run's
	// record keeps them).
	OnTransition func(t Transition, at time.Time, names []string)
	Logger       *slog.Logger
}

// Indicators completes each sample with the working sets, the high-fault
// set, the detector's state and the overcommit ratio.
type Indicators struct {
	cfg        Config
	det        *Detector
	lastFaults map[int]uint64 // counted major faults at the previous sample
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
	return &Indicators{cfg: cfg, det: NewDetector(cfg.Detector), lastFaults: map[int]uint64{}}, nil
}

// counted is the major faults the detector counts for a process: with
// --detector.fault-kind=anon, TPF's swap-ins, that is anon and shmem. On
// procfs alone the kind is unknown and every major fault counts.
func (ind *Indicators) counted(p *sampler.Process, withProbe bool) uint64 {
	if !withProbe {
		if ind.cfg.FaultKind == CountAnon && !ind.warnedKind {
			ind.warnedKind = true
			ind.cfg.Logger.Warn("the detector counts every major fault: on procfs alone anon and file faults cannot be told apart")
		}
		return p.MajorFaults[probe.Unknown]
	}
	if ind.cfg.FaultKind == CountAll {
		return p.MajorFaults.Total()
	}
	return p.MajorFaults.SwapIns()
}

// Annotate is the sampler's hook: it fills the indicator fields of cur.
func (ind *Indicators) Annotate(prev, cur *sampler.Sample) {
	withProbe := len(cur.Probes) > 0
	var secs float64
	if prev != nil {
		secs = cur.Time.Sub(prev.Time).Seconds()
	}
	in := Input{FaultRates: make(map[int]float64, len(cur.Processes))}
	seen := make(map[int]uint64, len(cur.Processes))
	for i := range cur.Processes {
		p := &cur.Processes[i]
		n := ind.counted(p, withProbe)
		seen[p.PID] = n
		if before, ok := ind.lastFaults[p.PID]; ok && secs > 0 && n >= before {
			in.FaultRates[p.PID] = float64(n-before) / secs
		}
		if ind.cfg.WorkingSet != nil {
			e, ok := ind.cfg.WorkingSet(p.PID)
			p.WorkingSetBytes, p.DemandBytes, p.HasWorkingSet = e.Bytes, e.DemandBytes, ok
		}
	}
	ind.lastFaults = seen

	if cur.HasRates {
		in.CPUBusy = cur.Rates.CPUBusyPercent
		in.PSIFull, in.HasPSI = cur.Rates.PressureFullPercent, cur.Pressure != nil && prev.Pressure != nil
		if tr := ind.det.Step(in); tr != nil {
			ind.report(*tr, cur)
		}
	}
	for i := range cur.Processes {
		cur.Processes[i].HighFault = ind.det.HighFault(cur.Processes[i].PID)
	}
	cur.HasDetector = true
	cur.ThrashingState = ind.det.State()
	cur.HighFaultCount = ind.det.HighCount()
	cur.Transitions = ind.det.Transitions()
	cur.WorkingSetRatio, cur.HasWorkingSetRatio = ind.ratio(cur)
	if ind.cfg.ScanSeconds != nil {
		cur.WorkingSetScanSeconds = ind.cfg.ScanSeconds()
	}
}

// ratio is Denning's overcommit: the tracked processes' demand (their
// working sets in their own time) over the memory they have. During a run,
// the consumers' against the cgroup limit; else every tracked process's
// against what they hold plus what is free.
func (ind *Indicators) ratio(cur *sampler.Sample) (float64, bool) {
	if ind.cfg.Scope != nil {
		if pids, limit, ok := ind.cfg.Scope(); ok && limit > 0 && len(pids) > 0 {
			in := make(map[int]bool, len(pids))
			for _, pid := range pids {
				in[pid] = true
			}
			var ws uint64
			known := false
			for _, p := range cur.Processes {
				if in[p.PID] && p.HasWorkingSet {
					ws += p.DemandBytes
					known = true
				}
			}
			return float64(ws) / float64(limit), known
		}
	}
	var ws, rss uint64
	known := false
	for _, p := range cur.Processes {
		if p.HasWorkingSet {
			ws += p.DemandBytes
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

// report logs a transition with the processes involved.
func (ind *Indicators) report(tr Transition, cur *sampler.Sample) {
	comm := make(map[int]string, len(cur.Processes))
	for _, p := range cur.Processes {
		comm[p.PID] = p.Comm
	}
	names := make([]string, 0, len(tr.HighFault))
	for _, pid := range tr.HighFault {
		names = append(names, comm[pid]+"/"+strconv.Itoa(pid))
	}
	level := slog.LevelInfo
	if tr.To == Thrashing {
		level = slog.LevelWarn
	}
	ind.cfg.Logger.Log(context.Background(), level, "thrash detector: "+StateNames[tr.From]+" → "+StateNames[tr.To],
		"why", tr.Why, "high_fault", strings.Join(names, " "))
	if ind.cfg.OnTransition != nil {
		ind.cfg.OnTransition(tr, cur.Time, names)
	}
}
