package indicators

import (
	"math"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// sample builds a sample at t seconds with CPU busy share busy (of 100
// ticks per second) and the given cumulative anon faults per pid.
func sample(t float64, busy float64, faults map[int]uint64) *sampler.Sample {
	s := &sampler.Sample{
		Time:   time.Unix(1000, 0).Add(time.Duration(t * float64(time.Second))),
		CPU:    procfs.CPUSeconds{User: t * busy, Idle: t * (100 - busy)},
		Memory: procfs.Memory{AvailableBytes: 100 << 20},
		Probes: []probe.Status{{Name: probe.MajorFaults, Attached: true}},
	}
	for pid, n := range faults {
		s.Processes = append(s.Processes, sampler.Process{Process: procfs.Process{PID: pid, Comm: "consumer", ResidentBytes: 50 << 20}, MajorFaults: probe.FaultCounts{probe.Anon: n, probe.File: 1000}})
	}
	return s
}

func TestIndicatorsFollowARun(t *testing.T) {
	var got []Transition
	ind, err := New(Config{
		Detector: DefaultDetectorConfig(), FaultKind: CountAnon,
		// The ratio is of the demand, not the wall-clock working set.
		WorkingSet: func(pid int) (WorkingSetEstimate, bool) {
			return WorkingSetEstimate{Bytes: 40 << 20, DemandBytes: 60 << 20}, true
		},
		Scope:        func() ([]int, int64, bool) { return []int{1, 2}, 100 << 20, true },
		OnTransition: func(tr Transition, _ time.Time, names []string) { got = append(got, tr) },
	})
	if err != nil {
		t.Fatal(err)
	}
	// Two processes at 100 anon faults/s on starved CPUs: monitoring, then
	// thrashing. File faults must not count with fault-kind=anon.
	var prev *sampler.Sample
	for i := range 4 {
		cur := sample(float64(i), 20, map[int]uint64{1: uint64(100 * i), 2: uint64(100 * i), 3: 0})
		annotate(ind, prev, cur)
		prev = cur
	}
	if prev.ThrashingState != Thrashing || prev.HighFaultCount != 2 || len(got) != 2 {
		t.Fatalf("state %d, %d high, transitions %+v", prev.ThrashingState, prev.HighFaultCount, got)
	}
	if prev.Transitions[Thrashing] != 1 || prev.Transitions[Monitoring] != 1 {
		t.Errorf("transition counts %v", prev.Transitions)
	}
	for _, p := range prev.Processes {
		if p.HighFault != (p.PID != 3) || !p.HasWorkingSet {
			t.Errorf("pid %d: high %v, ws %v", p.PID, p.HighFault, p.HasWorkingSet)
		}
	}
	// Consumers' 2 × 60 MiB against the 100 MiB cgroup limit.
	if !prev.HasWorkingSetRatio || math.Abs(prev.WorkingSetRatio-1.2) > 1e-9 {
		t.Errorf("ratio %v %v, want 1.2", prev.WorkingSetRatio, prev.HasWorkingSetRatio)
	}
	// The faults stop: back to normal.
	cur := sample(5, 20, map[int]uint64{1: 300, 2: 300, 3: 0})
	annotate(ind, prev, cur)
	if cur.ThrashingState != Normal || cur.HighFaultCount != 0 {
		t.Errorf("after the faults stop: state %d, %d high", cur.ThrashingState, cur.HighFaultCount)
	}
}

func TestIndicatorsHostRatioAndFaultKind(t *testing.T) {
	ind, _ := New(Config{Detector: DefaultDetectorConfig(), FaultKind: CountAll,
		WorkingSet: func(pid int) (WorkingSetEstimate, bool) {
			return WorkingSetEstimate{Bytes: 20 << 20, DemandBytes: 25 << 20}, pid != 3
		}})
	prev := sample(0, 20, map[int]uint64{1: 0, 2: 0, 3: 0})
	annotate(ind, nil, prev)
	cur := sample(1, 20, map[int]uint64{1: 0, 2: 0, 3: 0})
	// fault-kind=all: the 1000 file faults in sample() appear only as a
	// level, so rates stay 0 here; bump file faults on two processes.
	cur.Processes[0].MajorFaults[probe.File] += 50
	cur.Processes[1].MajorFaults[probe.File] += 50
	annotate(ind, prev, cur)
	if cur.HighFaultCount != 2 {
		t.Errorf("fault-kind=all: %d high, want 2 (file faults count)", cur.HighFaultCount)
	}
	// Host-wide: 2 × 25 MiB of working set over 100 MiB available plus
	// their 2 × 50 MiB resident.
	if want := 50.0 / 200; math.Abs(cur.WorkingSetRatio-want) > 1e-9 {
		t.Errorf("host ratio %v, want %v", cur.WorkingSetRatio, want)
	}
	if _, err := New(Config{Detector: DefaultDetectorConfig(), FaultKind: "swap"}); err == nil {
		t.Error("a bad fault kind was accepted")
	}
}

// annotate does what the sampler does before its Annotate hook: the rates
// since the previous sample.
func annotate(ind *Indicators, prev, cur *sampler.Sample) {
	if prev != nil {
		cur.Rates, cur.HasRates = sampler.RatesBetween(prev, cur), true
	}
	ind.Annotate(prev, cur)
}
