package observer

import (
	"log/slog"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/flow"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
)

// declarePipeline is the daemon's data flow (package flow declares it for
// every user): the probes when they loaded, top-K, working sets, the
// workloads (the busiest cgroups, where the probes count per cgroup), the
// active run's scope, recorder and policy, then the live page's history.
// The metrics read the latest tick at each scrape; the working-set
// estimator, on its own clock, serves the indicators its estimates.
func (o *Observer) declarePipeline(cfg Config, fs procfs.FS, logger *slog.Logger) (*pipeline.Pipeline, error) {
	opts := flow.Options{
		ProcFS: fs, ProcfsPath: cfg.ProcfsPath, Interval: cfg.SampleInterval, TopK: cfg.TopK,
		Detector: cfg.Detector, FaultKind: cfg.FaultKind, WSSInterval: cfg.WSSInterval, WSSPeriod: cfg.WSSPeriod,
		Sinks: []pipeline.Sink{o.history}, Logger: logger,
	}
	if o.probe != nil {
		opts.Probe = o.probe
		if o.probe.Cgroups() {
			h, err := cgroup.UnifiedHierarchy(cfg.ProcfsPath)
			if err != nil {
				logger.Warn("no workloads' series: "+err.Error(), "component", "workloads")
			} else {
				opts.Workloads = flow.WorkloadOptions{TopK: cfg.CgroupTopK, Depth: cfg.CgroupDepth, Hierarchy: h}
				opts.Workloads.V1Memory, _ = cgroup.V1MemoryMount(cfg.ProcfsPath)
			}
		}
	}
	if o.engine != nil {
		opts.Run = o.engine.Stages()
	}
	f, err := flow.Declare(opts)
	if err != nil {
		return nil, err
	}
	o.wss = f.WorkingSet
	return f.Pipeline, nil
}
