package pipeline

// The declaration, for the daemon, loadgen run and observer compare alike:
// the active run's scope, the sampler's reading (the probes, or procfs
// alone), the indicators' verdict (working sets, the high-fault set, the
// detector), then the sinks in order: the run recorder, the run's policy,
// the working-set scan and the caller's own (the live page's history). Each
// caller picks the options; the graph is this one.

import (
	"log/slog"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/workload"
)

// Probe is what the flow reads of the BPF probes: the sampler's reading,
// each process's stall for its working set, and whether it counts per
// cgroup (and the cgroups it may forget).
type Probe interface {
	sampler.ProbeReader
	StallOf(tgid uint32) (readout.StallTime, bool)
	FaultServiceOf(tgid uint32) (time.Duration, bool)
	Cgroups() bool
	ForgetCgroup(id uint64)
}

// RunStages are the run side of the flow: the active run's scope, its
// recorder (a sink) and its policy (a sink after the recorder that may
// block: the flow gives it a goroutine of its own).
type RunStages struct {
	Scope    func() indicators.Scope
	Recorder Sink
	Policy   Sink
}

// Options are what differs between the flow's users.
type Options struct {
	ProcFS     procfs.FS
	ProcfsPath string
	// Probe is nil on procfs alone.
	Probe     Probe
	Interval  time.Duration
	TopK      int
	Detector  indicators.DetectorConfig
	FaultKind string
	// WSSInterval is τ of the working-set estimate, 0 for none; WSSPeriod
	// how often each process's is measured.
	WSSInterval, WSSPeriod time.Duration
	// Workloads ranks the cgroups the probes count per cgroup; zero TopK,
	// or a probe that does not count them, is none.
	Workloads WorkloadOptions
	// Run is nil where runs are not made (observer --check).
	Run *RunStages
	// Sinks come after the run's recorder and policy.
	Sinks []Sink
	// Wake steps the flow before its tick when memory pressure begins
	// (see Config.Wake); nil keeps to the interval.
	Wake   <-chan struct{}
	Logger *slog.Logger
}

// WorkloadOptions bound the workloads' series.
type WorkloadOptions struct {
	TopK, Depth int
	// Trust says where a path's unit and pod names are believed.
	Trust workload.Trust
	// Hierarchy is the cgroup2 mount the ids are named in; V1Memory the
	// v1 memory mount where memory is on v1, whose group at a workload's
	// path gives its memory readings.
	Hierarchy cgroup.Hierarchy
	V1Memory  string
	// Pairs names the memory groups of thrashscope's own groups, where
	// they are not at the same path (a run's).
	Pairs *cgroup.Pairs
}

// files are where a workload's cgroup files are.
func (w WorkloadOptions) files(path string) workload.Files {
	f := workload.Files{V2: w.Hierarchy.Dir(path), V2Root: w.Hierarchy.Point}
	if w.V1Memory != "" {
		if f.V1Memory = w.Pairs.Memory(f.V2); f.V1Memory == "" {
			f.V1Memory = workload.V1MemoryGroup(w.V1Memory, path)
		}
	}
	return f
}

// Flow is the declared pipeline and the stages its users look at.
type Flow struct {
	Pipeline *Pipeline
	// WorkingSetScan is the working-set stage (nil without working sets).
	WorkingSetScan *WorkingSetScan
	// Policy is the run's policy stage (nil without runs): it skips the
	// ticks that arrive while it still acts on an earlier one.
	Policy *Async
}

// Declare builds the flow, top to bottom.
func Declare(o Options) (Flow, error) {
	var f Flow
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	pc := Config{Interval: o.Interval, Wake: o.Wake, Logger: o.Logger.With("component", "sampler")}

	// 1. Scope: the active run's consumers (tracked whatever their
	// activity) and its limit.
	if o.Run != nil {
		pc.Scope = o.Run.Scope
	}

	// 2. Reading: the probes (or procfs alone) and procfs.
	scfg := sampler.Config{ProcFS: o.ProcFS, Interval: o.Interval, TopK: o.TopK, Logger: pc.Logger}
	if o.Probe != nil {
		scfg.Probe = o.Probe
	}
	pc.Sampler = sampler.New(scfg)

	// 3. Verdict: working sets, the high-fault set, the detector.
	icfg := indicators.Config{Detector: o.Detector, FaultKind: o.FaultKind, Logger: o.Logger.With("component", "detector")}
	if o.WSSInterval > 0 {
		f.WorkingSetScan = o.workingSetScan()
		icfg.WorkingSets = f.WorkingSetScan.ws
	}
	ind, err := indicators.New(icfg)
	if err != nil {
		return Flow{}, err
	}
	pc.Indicators = ind

	// 3b. Workloads: the busiest cgroups, named and folded.
	if w := o.Workloads; w.TopK > 0 && o.Probe != nil && o.Probe.Cgroups() {
		r, err := workload.NewResolver(w.Hierarchy)
		if err != nil {
			return Flow{}, err
		}
		pc.Workloads = workload.NewTracker(workload.Config{
			TopK: w.TopK, Depth: w.Depth, Trust: w.Trust, Paths: r, Forget: o.Probe.ForgetCgroup,
			Files: w.files, Detector: o.Detector, ProcRoot: o.ProcfsPath, Logger: o.Logger.With("component", "workloads"),
		})
	}

	// 4. Sinks: the run recorder; the active run's policy, which decides
	// on the verdict and acts on the run's consumers, on a goroutine of
	// its own, so the sampling never waits for a cgroup write; the
	// working-set scan, which learns from each tick what to scan and scans
	// on its own clock; then the caller's.
	if o.Run != nil {
		f.Policy = NewAsync(o.Run.Policy)
		pc.Sinks = append(pc.Sinks, o.Run.Recorder, f.Policy)
	}
	if f.WorkingSetScan != nil {
		pc.Sinks = append(pc.Sinks, f.WorkingSetScan)
	}
	pc.Sinks = append(pc.Sinks, o.Sinks...)
	f.Pipeline = New(pc)
	return f, nil
}

// workingSetScan is the working-set stage: τ the interval, each process
// measured every period, its demand from the probes' stall where they run.
func (o Options) workingSetScan() *WorkingSetScan {
	wcfg := indicators.WorkingSetConfig{
		ProcfsPath: o.ProcfsPath, Interval: o.WSSInterval, Logger: o.Logger.With("component", "wss"),
		Every: int((o.WSSPeriod + o.WSSInterval/2) / o.WSSInterval),
	}
	if p := o.Probe; p != nil {
		wcfg.Stall = func(pid int) (time.Duration, bool) {
			s, ok := p.StallOf(uint32(pid))
			return s.Total(), ok
		}
		wcfg.FaultService = func(pid int) (time.Duration, bool) {
			return p.FaultServiceOf(uint32(pid))
		}
	}
	scan := &WorkingSetScan{ws: indicators.NewWorkingSet(wcfg)}
	if o.Run != nil {
		scan.scope = o.Run.Scope
	}
	return scan
}
