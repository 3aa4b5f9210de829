// Package pipeline is thrashscope's data flow, declared once (Declare, in
// flow.go) and run here. Each tick it asks the active run for its scope,
// has the sampler read the host, has the indicators judge the reading,
// publishes the result as a Tick and hands it to every sink in turn:
//
//	run scope ──▶ sampler.Read ──▶ indicators.Judge ──▶ Tick ──▶ sinks
//	(pids, limit)   (Reading)         (Verdict)                 (history, run recorder, …)
//
// The metrics read the latest Tick when Prometheus scrapes. Each stage owns
// its output type; no stage writes into another's.
package pipeline

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/workload"
)

// Tick is one pass of the pipeline: the host's reading and the verdict on
// it. Sinks and readers must not change it.
type Tick struct {
	Reading *sampler.Reading
	// Verdict is nil when the pipeline runs without indicators.
	Verdict *indicators.Verdict
	// Scope is the active run's, when the tick was taken.
	Scope indicators.Scope
	// Workloads are the busiest cgroups (top-K), busiest first; nil
	// without per-cgroup counters.
	Workloads []workload.Workload
	// Wakes counts the steps so far that a wake brought early.
	Wakes uint64
}

// Sink receives every tick, with the one before it (nil at first), on the
// pipeline's goroutine: it must return quickly. A sink that may block is
// wrapped in NewAsync, a stage on a goroutine of its own.
type Sink interface {
	Observe(prev, cur *Tick)
}

// background is a sink with a goroutine of its own, which Run starts
// before the first step and stops before it returns.
type background interface {
	run(ctx context.Context)
}

// SinkFunc adapts a function to a Sink.
type SinkFunc func(prev, cur *Tick)

// Observe calls f.
func (f SinkFunc) Observe(prev, cur *Tick) { f(prev, cur) }

// Config declares the pipeline.
type Config struct {
	Sampler *sampler.Sampler
	// Indicators judge each reading; nil leaves Tick.Verdict nil.
	Indicators *indicators.Indicators
	// Workloads follow the per-cgroup counters; nil leaves
	// Tick.Workloads nil.
	Workloads *workload.Tracker
	// Scope is the active run's consumers and limit; nil is no run ever.
	Scope    func() indicators.Scope
	Sinks    []Sink
	Interval time.Duration
	// Wake steps the pipeline before its tick is due (the probes' wakes,
	// or a PSI trigger's; nil never does): a thrash that begins between two
	// ticks is judged within a wake, not a tick. A wake is taken only while the
	// detector is not already thrashing and MinWakeGap after the last step;
	// the next tick then comes an interval after it. At rest nothing wakes.
	Wake   <-chan struct{}
	Logger *slog.Logger
}

// MinWakeGap is the least time between a step and one a wake brings: the
// rates of a shorter interval say little. The probes space their wakes as
// far apart.
const MinWakeGap = 250 * time.Millisecond

// wakeSlack is how much sooner than MinWakeGap after a step's start a wake
// is still taken: the probes' wakes come MinWakeGap apart, and a step
// begins a little after the wake that brought it.
const wakeSlack = 50 * time.Millisecond

// Pipeline runs the stages once per tick and holds the latest Tick.
type Pipeline struct {
	cfg Config

	mu     sync.RWMutex
	latest *Tick
	wakes  atomic.Uint64
}

// New returns a pipeline; call Run to start it.
func New(cfg Config) *Pipeline {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	return &Pipeline{cfg: cfg}
}

// Run steps every interval until ctx is done. The asynchronous sinks run
// beside it, and are stopped before it returns; the files the sampler and
// the workloads kept open are closed.
func (p *Pipeline) Run(ctx context.Context) {
	defer p.cfg.Sampler.Close()
	if p.cfg.Workloads != nil {
		defer p.cfg.Workloads.Close()
	}
	var wg sync.WaitGroup
	actx, stop := context.WithCancel(context.Background())
	for _, s := range p.cfg.Sinks {
		if a, ok := s.(*Async); ok {
			a.running.Store(true) // before the first step hands it a tick
		}
		if b, ok := s.(background); ok {
			wg.Go(func() { b.run(actx) })
		}
	}
	defer func() { stop(); wg.Wait() }()
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		began := time.Now()
		_ = p.Step() // the sampler logs a source as it starts and stops failing
		t.Reset(p.cfg.Interval)
		if !p.wait(ctx, t.C, began) {
			return
		}
	}
}

// wait waits for the next tick, or a wake worth a step; false once ctx is
// done. The gap a wake needs is from when the last step began, as its
// interval's rates are: the probes wake every MinWakeGap through a thrash's
// first second, and a gap counted from the step's end skipped every other
// wake.
func (p *Pipeline) wait(ctx context.Context, tick <-chan time.Time, stepped time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick:
			return true
		case <-p.cfg.Wake:
			if time.Since(stepped) >= MinWakeGap-wakeSlack && !p.thrashing() {
				p.wakes.Add(1)
				return true
			}
		}
	}
}

// thrashing says whether the latest verdict is thrashing.
func (p *Pipeline) thrashing() bool {
	t, ok := p.Latest()
	return ok && t.Verdict != nil && t.Verdict.State == indicators.Thrashing
}

// Wakes counts the steps a wake brought before their tick.
func (p *Pipeline) Wakes() uint64 { return p.wakes.Load() }

// Step runs the stages once. A source the sampler could not read is
// reported; the tick still goes through with what was read.
func (p *Pipeline) Step() error {
	var scope indicators.Scope
	if p.cfg.Scope != nil {
		scope = p.cfg.Scope()
	}
	reading, err := p.cfg.Sampler.Read(scope.PIDs)
	prev, _ := p.Latest()
	cur := &Tick{Reading: reading, Scope: scope, Wakes: p.wakes.Load()}
	if p.cfg.Indicators != nil {
		var before *sampler.Reading
		if prev != nil {
			before = prev.Reading
		}
		v := p.cfg.Indicators.Judge(before, reading, scope)
		cur.Verdict = &v
	}
	if p.cfg.Workloads != nil && reading.Cgroups != nil {
		cur.Workloads = p.cfg.Workloads.ObserveWith(reading.Time, reading.Cgroups, thrashers(cur.Verdict))
	}
	p.mu.Lock()
	p.latest = cur
	p.mu.Unlock()
	for _, s := range p.cfg.Sinks {
		s.Observe(prev, cur)
	}
	return err
}

// thrashers are the high-fault processes while the host thrashes, nil
// otherwise: a workload holding enough of them thrashes too.
func thrashers(v *indicators.Verdict) []int {
	if v == nil || v.State != indicators.Thrashing {
		return nil
	}
	var pids []int
	for pid, pv := range v.Processes {
		if pv.HighFault {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Latest returns the newest Tick, and false before the first one.
func (p *Pipeline) Latest() (*Tick, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.latest, p.latest != nil
}
