package pipeline

import (
	"slices"
	"testing"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// recorder is a sink that keeps what it was handed.
type recorder struct{ prev, cur []*Tick }

func (r *recorder) Observe(prev, cur *Tick) {
	r.prev, r.cur = append(r.prev, prev), append(r.cur, cur)
}

func newSampler(t *testing.T) *sampler.Sampler {
	t.Helper()
	fs, err := procfs.NewFS("../procfs/testdata/proc")
	if err != nil {
		t.Fatal(err)
	}
	return sampler.New(sampler.Config{ProcFS: fs, TopK: 5})
}

// A step reads with the scope's pids pinned, judges the reading with that
// scope, publishes the tick and hands it to every sink in order, with the
// tick before it.
func TestStepFlowsOneWay(t *testing.T) {
	ind, err := indicators.New(indicators.Config{Detector: indicators.DefaultDetectorConfig(), FaultKind: indicators.CountAll})
	if err != nil {
		t.Fatal(err)
	}
	scope := indicators.Scope{PIDs: []int{4242}, LimitBytes: 100 << 20}
	var order []string
	first, second := &recorder{}, &recorder{}
	p := New(Config{
		Sampler:    newSampler(t),
		Indicators: ind,
		Scope:      func() indicators.Scope { order = append(order, "scope"); return scope },
		Sinks: []Sink{
			first,
			SinkFunc(func(_, _ *Tick) { order = append(order, "sink") }),
			second,
		},
	})
	if _, ok := p.Latest(); ok {
		t.Fatal("a tick before the first step")
	}
	for range 2 {
		if err := p.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"scope", "sink", "scope", "sink"}; !slices.Equal(order, want) {
		t.Errorf("stages ran %v, want %v", order, want)
	}
	latest, ok := p.Latest()
	if !ok || len(first.cur) != 2 || first.cur[1] != latest || second.cur[1] != latest {
		t.Fatalf("the sinks got %d ticks, the latest not the last one handed on", len(first.cur))
	}
	if first.prev[0] != nil || first.prev[1] != first.cur[0] {
		t.Errorf("prev: %p then %p, want nil then the first tick %p", first.prev[0], first.prev[1], first.cur[0])
	}
	pids := make([]int, 0, len(latest.Reading.Processes))
	for _, pr := range latest.Reading.Processes {
		pids = append(pids, pr.PID)
	}
	if !slices.Contains(pids, 4242) {
		t.Errorf("tracked %v, want the scope's pid 4242 pinned", pids)
	}
	if latest.Verdict == nil || !latest.Reading.HasRates {
		t.Fatalf("second tick: verdict %v, rates %v; want both", latest.Verdict, latest.Reading.HasRates)
	}
	if _, ok := latest.Verdict.Processes[4242]; !ok || !slices.Equal(latest.Scope.PIDs, scope.PIDs) {
		t.Errorf("the verdict does not cover the reading's processes, or the tick lost its scope: %+v", latest)
	}
}

// Without indicators a tick carries the reading alone.
func TestStepWithoutIndicators(t *testing.T) {
	p := New(Config{Sampler: newSampler(t)})
	if err := p.Step(); err != nil {
		t.Fatal(err)
	}
	if tick, ok := p.Latest(); !ok || tick.Reading == nil || tick.Verdict != nil {
		t.Errorf("tick %+v, want a reading and no verdict", tick)
	}
}
