// Package standalone assembles one run without the observer, for loadgen
// run and observer compare: the run side (package runner) in a data
// directory of its own, and the flow on procfs alone feeding its recorder
// and its policy.
package standalone

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/runner"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/store"
)

// Config configures one run without the observer.
type Config struct {
	Spec   run.Spec
	OutDir string
	Binary string
	// CgroupParent is where the run cgroup goes; empty is this process's own.
	CgroupParent string
	ProcfsPath   string
	// Progress receives the live progress line; Interactive redraws it in
	// place, otherwise a line is printed every ProgressEvery.
	Progress      io.Writer
	Interactive   bool
	ProgressEvery time.Duration
	Logger        *slog.Logger
	// Detector is what a policy sees as thrashing; the zero value is
	// DefaultDetectorConfig.
	Detector indicators.DetectorConfig
	// Timeout, when set, aborts a run still going after it, with a reason
	// that names it: a bound on one run of a comparison, kept as aborted
	// with what it did.
	Timeout time.Duration
	// AllowHostSettings is the operator's opt-in to a spec's host-wide
	// memory settings (--settings.allow-host).
	AllowHostSettings bool
}

// Run runs one experiment to its end, or until ctx is cancelled
// (Ctrl-C), which aborts it cleanly. It samples the host from procfs every
// second for samples.csv, as the observer would.
func Run(ctx context.Context, cfg Config) (run.Record, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 5 * time.Second
	}
	st, err := store.Open(cfg.OutDir)
	if err != nil {
		return run.Record{}, err
	}
	fs, err := procfs.NewFS(cfg.ProcfsPath)
	if err != nil {
		return run.Record{}, err
	}
	rc := runner.Config{Store: st, ProcFS: fs, Binary: cfg.Binary, Logger: cfg.Logger, AllowHostSettings: cfg.AllowHostSettings}
	rc.Parent, rc.ParentErr = cgroup.ChooseParent(cfg.CgroupParent, cfg.ProcfsPath)
	e, err := runner.New(rc)
	if err != nil {
		cfg.Logger.Warn("cleaning up after an earlier run", "err", err)
	}

	// The observer's flow without the probes or the working sets: the
	// run's consumers read from procfs, the detector on every major fault
	// (procfs cannot tell swap-ins apart), into the recorder and the run's
	// policy.
	if cfg.Detector == (indicators.DetectorConfig{}) {
		cfg.Detector = indicators.DefaultDetectorConfig()
	}
	f, err := pipeline.Declare(pipeline.Options{
		ProcFS: fs, ProcfsPath: cfg.ProcfsPath, Interval: time.Second, TopK: 1,
		Detector: cfg.Detector, FaultKind: indicators.CountAll, Run: e.Stages(), Logger: cfg.Logger,
	})
	if err != nil {
		e.Close() // nothing ran: its scratch/ goes
		return run.Record{}, err
	}
	line := f.Pipeline
	rec, err := e.Start(cfg.Spec)
	if err != nil {
		e.Close()
		return rec, err
	}
	run := e.Active()
	sctx, stopSampling := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { line.Run(sctx) })
	defer func() { stopSampling(); wg.Wait() }()

	follow(ctx, cfg, e.Service(), rec.ID, run, line)
	e.Close() // waits for the final save
	if cfg.Interactive {
		fmt.Fprintln(cfg.Progress)
	}
	return e.Service().Get(rec.ID)
}

// follow prints the run's progress until it ends; an interrupt (ctx)
// aborts it and waits until it is gone.
func follow(ctx context.Context, cfg Config, s *runner.Service, id string, r runner.Running, line *pipeline.Pipeline) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var timeout <-chan time.Time
	if cfg.Timeout > 0 {
		t := time.NewTimer(cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	lastPrint := time.Time{}
	for {
		select {
		case <-timeout:
			fmt.Fprintf(cfg.Progress, "\nstill running after %s: stopping the consumers and removing the run cgroup\n", cfg.Timeout)
			r.Abort(fmt.Sprintf("still running after the timeout of %s", cfg.Timeout))
			<-r.Done()
			return
		case <-ctx.Done():
			fmt.Fprintln(cfg.Progress, "\naborting: stopping the consumers and removing the run cgroup")
			s.Abort(id)
			<-r.Done()
			return
		case <-r.Done():
			return
		case now := <-tick.C:
			if !cfg.Interactive && now.Sub(lastPrint) < cfg.ProgressEvery {
				continue
			}
			lastPrint = now
			var rates sampler.Rates
			if t, ok := line.Latest(); ok {
				rates = t.Reading.Rates
			}
			text := ProgressLine(r.Progress(), rates)
			if pl := runner.PolicyLine(r.PolicyState()); pl != "" {
				text += "  " + pl
			}
			if cfg.Interactive {
				fmt.Fprint(cfg.Progress, "\r\033[K"+text)
			} else {
				fmt.Fprintln(cfg.Progress, text)
			}
		}
	}
}

// ProgressLine is the one-line live view of a run.
func ProgressLine(p run.Progress, r sampler.Rates) string {
	total := "?"
	if p.Total > 0 {
		total = p.Total.Round(time.Second).String()
	}
	line := fmt.Sprintf("%s/%s  consumers %d/%d  demand %s of %s  swap-in %.0f/s  slowest cycle %s",
		p.Elapsed.Round(time.Second), total, p.Active, p.Planned,
		mebibytes(p.DemandBytes), mebibytes(p.LimitBytes), r.SwapInPagesPerSecond, p.SlowestCycle.Round(time.Millisecond))
	if p.ChunksDone > 0 {
		line += fmt.Sprintf("  chunks filled %d", p.ChunksDone)
	}
	return line
}

func mebibytes(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
