package pipeline

import (
	"slices"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// fakeRun's stages record the order in which the flow calls them.
func fakeRun(calls *[]string) *RunStages {
	stage := func(name string) Sink {
		return SinkFunc(func(_, _ *Tick) { *calls = append(*calls, name) })
	}
	return &RunStages{
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
	history := SinkFunc(func(_, _ *Tick) { calls = append(calls, "history") })
	f, err := Declare(Options{
		ProcFS: fs, Interval: time.Second, TopK: 5, Detector: indicators.DefaultDetectorConfig(),
		FaultKind: indicators.CountAll, Run: fakeRun(&calls), Sinks: []Sink{history},
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.WorkingSetScan != nil {
		t.Error("a working-set scan without WSSInterval")
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
		FaultKind: indicators.CountAll, WSSInterval: time.Second, WSSPeriod: 10 * time.Second, Sinks: []Sink{history}})
	if err != nil {
		t.Fatal(err)
	}
	if f.WorkingSetScan == nil {
		t.Fatal("no working-set scan with WSSInterval set")
	}
	if err := f.Pipeline.Step(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(calls, []string{"history"}) {
		t.Errorf("without a run the stages ran %v, want the caller's sink alone", calls)
	}
	// The scan is a declared sink: the tick it saw names what it scans.
	if tick, _ = f.Pipeline.Latest(); f.WorkingSetScan.latest.Load() != tick {
		t.Error("the working-set scan did not see the tick")
	}
}

// A round scans the active run's consumers first, whatever their activity,
// then the newest tick's processes, busiest first, each once.
func TestWorkingSetScanOrder(t *testing.T) {
	s := &WorkingSetScan{scope: func() indicators.Scope { return indicators.Scope{PIDs: []int{7, 3}} }}
	if got := s.pids(); !slices.Equal(got, []int{7, 3}) {
		t.Errorf("before any tick: %v, want the run's 7 and 3", got)
	}
	s.Observe(nil, &Tick{Reading: &sampler.Reading{Processes: []sampler.Process{proc(9), proc(3), proc(1)}}})
	if got := s.pids(); !slices.Equal(got, []int{7, 3, 9, 1}) {
		t.Errorf("%v, want [7 3 9 1]", got)
	}
}

func proc(pid int) sampler.Process {
	var p sampler.Process
	p.PID = pid
	return p
}
