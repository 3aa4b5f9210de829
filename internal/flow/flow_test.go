package flow

import (
	"slices"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
)

// fakeRun's stages record the order in which the flow calls them.
func fakeRun(calls *[]string) *Run {
	stage := func(name string) pipeline.Sink {
		return pipeline.SinkFunc(func(_, _ *pipeline.Tick) { *calls = append(*calls, name) })
	}
	return &Run{
		Scope: func() indicators.Scope {
			*calls = append(*calls, "scope")
			return indicators.Scope{PIDs: []int{4242}, LimitBytes: 100 << 20}
		},
		Recorder: stage("record"), Policy: stage("govern"),
	}
}

// One declaration, every user: a tick goes through the run's scope, then
// its recorder, then its policy, then the caller's sinks, in that order,
// a tick at a time (stepped by hand, the policy's own goroutine is not
// running, and it observes in line); without a run, only the caller's
// sinks.
func TestDeclareOrdersTheStages(t *testing.T) {
	fs, err := procfs.NewFS("../procfs/testdata/proc")
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	history := pipeline.SinkFunc(func(_, _ *pipeline.Tick) { calls = append(calls, "history") })
	f, err := Declare(Options{
		ProcFS: fs, Interval: time.Second, TopK: 5, Detector: indicators.DefaultDetectorConfig(),
		FaultKind: indicators.CountAll, Run: fakeRun(&calls), Sinks: []pipeline.Sink{history},
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.WorkingSet != nil {
		t.Error("a working-set estimator without WSSInterval")
	}
	if f.Policy == nil {
		t.Error("no policy stage of its own with a run")
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
