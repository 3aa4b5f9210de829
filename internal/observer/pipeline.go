package observer

import (
	"log/slog"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// declarePipeline is the observer's data flow, top to bottom: the active
// run's scope, the sampler's reading, the indicators' verdict, then the
// sinks, the run's policy among them. The metrics read the latest tick at
// each scrape; the working-set estimator, on its own clock, serves the
// indicators its estimates.
func (o *Observer) declarePipeline(cfg Config, fs procfs.FS, logger *slog.Logger) (*pipeline.Pipeline, error) {
	pc := pipeline.Config{Interval: cfg.SampleInterval, Logger: logger.With("component", "sampler")}

	// 1. Scope: the active run's consumers (tracked whatever their
	// activity) and its limit.
	if o.runs != nil {
		pc.Scope = o.runs.Scope
	}

	// 2. Reading: the probes (or procfs alone) and procfs.
	scfg := sampler.Config{ProcFS: fs, Interval: cfg.SampleInterval, TopK: cfg.TopK, Logger: pc.Logger}
	if o.probe != nil {
		scfg.Probe = o.probe
	}
	pc.Sampler = sampler.New(scfg)

	// 3. Verdict: working sets, the high-fault set, the detector.
	icfg := indicators.Config{Detector: cfg.Detector, FaultKind: cfg.FaultKind, Logger: logger.With("component", "detector")}
	if cfg.WSSInterval > 0 {
		wcfg := indicators.WorkingSetConfig{
			ProcfsPath: cfg.ProcfsPath, Interval: cfg.WSSInterval, Logger: logger.With("component", "wss"),
			Every: int((cfg.WSSPeriod + cfg.WSSInterval/2) / cfg.WSSInterval),
		}
		if p := o.probe; p != nil {
			wcfg.Stall = func(pid int) (time.Duration, bool) {
				s, ok := p.StallOf(uint32(pid))
				return s.Total(), ok
			}
		}
		o.wss = indicators.NewWorkingSet(wcfg)
		icfg.WorkingSet = o.wss.Estimate
		icfg.ScanSeconds = func() float64 { return o.wss.Stats().ScanSeconds }
	}
	ind, err := indicators.New(icfg)
	if err != nil {
		return nil, err
	}
	pc.Indicators = ind

	// 4. Sinks: the run recorder; the active run's policy, which decides
	// on the verdict and acts on the run's consumers; then the live
	// page's history.
	if o.runs != nil {
		pc.Sinks = append(pc.Sinks, o.runs, pipeline.SinkFunc(o.runs.Govern))
	}
	pc.Sinks = append(pc.Sinks, o.history)
	return pipeline.New(pc), nil
}
