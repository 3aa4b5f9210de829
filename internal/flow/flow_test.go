package flow

import (
	"slices"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
)

// fakeRun records the order in which the flow calls the run's stages.
type fakeRun struct{ calls *[]string }

func (r fakeRun) Scope() indicators.Scope {
	*r.calls = append(*r.calls, "scope")
	return indicators.Scope{PIDs: []int{4242}, LimitBytes: 100 << 20}
}
func (r fakeRun) Observe(_, _ *pipeline.Tick) { *r.calls = append(*r.calls, "record") }
func (r fakeRun) Govern(_, _ *pipeline.Tick)  { *r.calls = append(*r.calls, "govern") }

// One declaration, every user: a tick goes through the run's scope, then
// its recorder, then its policy, then the caller's sinks, in that order,
// a tick at a time; without a run, only the caller's sinks.
func TestDeclareOrdersTheStages(t *testing.T) {
	fs, err := procfs.NewFS("../procfs/testdata/proc")
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	history := pipeline.SinkFunc(func(_, _ *pipeline.Tick) { calls = append(calls, "history") })
	f, err := Declare(Options{
		ProcFS: fs, Interval: time.Second, TopK: 5, Detector: indicators.DefaultDetectorConfig(),
		FaultKind: indicators.CountAll, Run: fakeRun{&calls}, Sinks: []pipeline.Sink{history},
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.WorkingSet != nil {
		t.Error("a working-set estimator without WSSInterval")
	}
	for range 2 {
		if err := f.Pipeline.Step(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"scope", "record", "govern", "history", "scope", "record", "govern", "history"}
	if !slices.Equal(calls, want) {
		t.Errorf("stages ran %v, want %v", calls, want)
	}
	tick, ok := f.Pipeline.Latest()
	if !ok || tick.Verdict == nil {
		t.Fatalf("no tick with a verdict after two steps: %+v", tick)
	}

	calls = nil
	f, err = Declare(Options{ProcFS: fs, Interval: time.Second, TopK: 5, Detector: indicators.DefaultDetectorConfig(),
		FaultKind: indicators.CountAll, WSSInterval: time.Second, WSSPeriod: 10 * time.Second, Sinks: []pipeline.Sink{history}})
	if err != nil {
		t.Fatal(err)
	}
	if f.WorkingSet == nil {
		t.Error("no working-set estimator with WSSInterval set")
	}
	if err := f.Pipeline.Step(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(calls, []string{"history"}) {
		t.Errorf("without a run the stages ran %v, want the caller's sink alone", calls)
	}
}
