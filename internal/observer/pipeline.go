package observer

import (
	"log/slog"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/diagnosis"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/swapstate"
	"github.com/thrashscope/thrashscope/internal/workload"
)

// declarePipeline is the daemon's data flow (pipeline.Declare declares it
// for every user): the probes when they loaded, top-K, the workloads (the
// busiest cgroups, where the probes count per cgroup), the active run's
// scope, recorder and policy, the working-set scan, then the live page's
// history. The metrics read the latest tick at each scrape.
func (o *Observer) declarePipeline(cfg Config, fs procfs.FS, logger *slog.Logger, checkOnly bool) (*pipeline.Pipeline, error) {
	opts := pipeline.Options{
		ProcFS: fs, ProcfsPath: cfg.ProcfsPath, Interval: cfg.SampleInterval, TopK: cfg.TopK,
		Detector: cfg.Detector, FaultKind: cfg.FaultKind, WSSInterval: cfg.WSSInterval, WSSPeriod: cfg.WSSPeriod,
		Sinks: []pipeline.Sink{o.history}, Logger: logger,
	}
	if o.release != nil {
		opts.Sinks = append(opts.Sinks, o.release)
	}
	if o.probe != nil {
		opts.Probe = o.probe
		if o.probe.Cgroups() {
			opts.Workloads = workloadOptions(cfg, logger)
			opts.Workloads.Pairs = &o.pairs
			if opts.Workloads.TopK > 0 && !checkOnly {
				o.diagnoses = newDiagnoses(cfg, opts.Workloads, o.runs != nil, logger)
				opts.Sinks = append(opts.Sinks, o.diagnoses)
			}
		}
	}
	if o.runs != nil {
		opts.Run = o.runs.Stages()
	}
	switch {
	case o.probe != nil && o.probe.Wakes() != nil:
		opts.Wake = o.probe.Wakes()
	case o.wake != nil:
		opts.Wake = o.wake.C
	}
	f, err := pipeline.Declare(opts)
	if err != nil {
		return nil, err
	}
	return f.Pipeline, nil
}

// workloadOptions are where the workloads are named: --path.cgroupfs (a
// container's view of the host's cgroup mount, pure cgroup2 or hybrid),
// else the cgroup2 mount of this process; with the v1 memory mount beside
// it on a hybrid host.
func workloadOptions(cfg Config, logger *slog.Logger) pipeline.WorkloadOptions {
	w := pipeline.WorkloadOptions{TopK: cfg.CgroupTopK, Depth: cfg.CgroupDepth, Trust: workload.Trust{KubeletRoots: cfg.KubeletRoots}}
	if cfg.CgroupfsPath != "" {
		// Config.Validate checked it.
		w.Hierarchy, w.V1Memory, _ = cgroup.HostMount(cfg.CgroupfsPath)
		return w
	}
	h, err := cgroup.UnifiedHierarchy(cfg.ProcfsPath)
	if err != nil {
		logger.Warn("no workloads' series: "+err.Error(), "component", "workloads")
		return pipeline.WorkloadOptions{}
	}
	w.Hierarchy = h
	w.V1Memory, _ = cgroup.V1MemoryMount(cfg.ProcfsPath)
	return w
}

// newDiagnoses is the diagnoses' stage over the workloads, its closed
// diagnoses kept in the data dir where the runs keep theirs (the data
// dir checked as the daemon's own), in memory alone where there are no
// runs.
func newDiagnoses(cfg Config, w pipeline.WorkloadOptions, dataDir bool, logger *slog.Logger) *diagnosis.Stage {
	log := logger.With("component", "diagnoses")
	sc := diagnosis.StageConfig{V2Mount: w.Hierarchy.Point, V1Memory: w.V1Memory, Logger: log,
		Swap: swapstate.NewReader(cfg.ProcfsPath, cfg.SysfsPath), Proc: cfg.ProcfsPath}
	if dataDir {
		h, err := diagnosis.OpenHistory(cfg.DataDir)
		if err != nil {
			log.Warn("closed diagnoses are kept in memory only: "+err.Error(), "data_dir", cfg.DataDir)
		} else {
			sc.History = h
		}
	}
	return diagnosis.NewStage(sc)
}
