package indicators

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// sample builds a sample at t seconds with CPU busy share busy (of 100
// ticks per second) and the given cumulative anon faults per pid, the host
// evicting 500 pages a second as a thrash does.
func sample(t float64, busy float64, faults map[int]uint64) *sampler.Reading {
	s := &sampler.Reading{
		Time:   time.Unix(1000, 0).Add(time.Duration(t * float64(time.Second))),
		CPU:    procfs.CPUSeconds{User: t * busy, Idle: t * (100 - busy)},
		VMStat: procfs.VMStat{PgStealAnon: uint64(500 * t)},
		Memory: procfs.Memory{AvailableBytes: 100 << 20},
		Probes: []readout.Status{{Name: readout.MajorFaults, Attached: true}},
	}
	for pid, n := range faults {
		s.Processes = append(s.Processes, sampler.Process{Process: procfs.Process{PID: pid, Comm: "consumer", ResidentBytes: 50 << 20}, MajorFaults: readout.FaultCounts{readout.Anon: n, readout.File: 1000}})
	}
	return s
}

func TestIndicatorsFollowARun(t *testing.T) {
	var got []Transition
	ind, err := New(Config{
		Detector: DefaultDetectorConfig(), FaultKind: CountAnon,
		// The ratio is of the demand, not the wall-clock working set.
		WorkingSets: fixedWorkingSets(func(pid int) (WorkingSetEstimate, bool) {
			return WorkingSetEstimate{Bytes: 40 << 20, DemandBytes: 60 << 20}, true
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Two processes at 100 anon faults/s on starved CPUs: monitoring, then
	// thrashing. File faults must not count with fault-kind=anon.
	run := Scope{PIDs: []int{1, 2}, LimitBytes: 100 << 20}
	var prev *sampler.Reading
	var v Verdict
	for i := range 4 {
		cur := sample(float64(i), 20, map[int]uint64{1: uint64(100 * i), 2: uint64(100 * i), 3: 0})
		v = judge(ind, prev, cur, run)
		if v.Transition != nil {
			got = append(got, *v.Transition)
			if !v.Transition.At.Equal(cur.Time) {
				t.Errorf("a transition at %v, want the reading's time %v", v.Transition.At, cur.Time)
			}
		}
		prev = cur
	}
	if v.State != Thrashing || v.HighFaultCount != 2 || len(got) != 2 {
		t.Fatalf("state %d, %d high, transitions %+v", v.State, v.HighFaultCount, got)
	}
	if v.Transitions[Thrashing] != 1 || v.Transitions[Monitoring] != 1 {
		t.Errorf("transition counts %v", v.Transitions)
	}
	if tr := got[1]; !slices.Equal(tr.Names, []string{"consumer/1", "consumer/2"}) {
		t.Errorf("the transition to thrashing names %v, want consumer/1, consumer/2", tr.Names)
	}
	for _, p := range prev.Processes {
		if pv := v.Processes[p.PID]; pv.HighFault != (p.PID != 3) || !pv.HasWorkingSet {
			t.Errorf("pid %d: high %v, ws %v", p.PID, pv.HighFault, pv.HasWorkingSet)
		}
	}
	// Consumers' 2 × 60 MiB against the 100 MiB cgroup limit.
	if !v.HasWorkingSetRatio || math.Abs(v.WorkingSetRatio-1.2) > 1e-9 {
		t.Errorf("ratio %v %v, want 1.2", v.WorkingSetRatio, v.HasWorkingSetRatio)
	}
	// The faults stop: back to normal.
	cur := sample(5, 20, map[int]uint64{1: 300, 2: 300, 3: 0})
	v = judge(ind, prev, cur, run)
	if v.State != Normal || v.HighFaultCount != 0 {
		t.Errorf("after the faults stop: state %d, %d high", v.State, v.HighFaultCount)
	}
}

func TestIndicatorsHostRatioAndFaultKind(t *testing.T) {
	ind, _ := New(Config{Detector: DefaultDetectorConfig(), FaultKind: CountAll,
		WorkingSets: fixedWorkingSets(func(pid int) (WorkingSetEstimate, bool) {
			return WorkingSetEstimate{Bytes: 20 << 20, DemandBytes: 25 << 20}, pid != 3
		})})
	prev := sample(0, 20, map[int]uint64{1: 0, 2: 0, 3: 0})
	judge(ind, nil, prev, Scope{})
	cur := sample(1, 20, map[int]uint64{1: 0, 2: 0, 3: 0})
	// fault-kind=all: the 1000 file faults in sample() appear only as a
	// level, so rates stay 0 here; bump file faults on two processes.
	cur.Processes[0].MajorFaults[readout.File] += 50
	cur.Processes[1].MajorFaults[readout.File] += 50
	v := judge(ind, prev, cur, Scope{})
	if v.HighFaultCount != 2 {
		t.Errorf("fault-kind=all: %d high, want 2 (file faults count)", v.HighFaultCount)
	}
	// Host-wide: 2 × 25 MiB of working set over 100 MiB available plus
	// their 2 × 50 MiB resident.
	if want := 50.0 / 200; math.Abs(v.WorkingSetRatio-want) > 1e-9 {
		t.Errorf("host ratio %v, want %v", v.WorkingSetRatio, want)
	}
	if _, err := New(Config{Detector: DefaultDetectorConfig(), FaultKind: "swap"}); err == nil {
		t.Error("a bad fault kind was accepted")
	}
}

// judge does what the sampler does before the pipeline judges a reading
// (the rates since the previous one), then judges it.
func judge(ind *Indicators, prev, cur *sampler.Reading, scope Scope) Verdict {
	if prev != nil {
		sampler.Complete(prev, cur)
	}
	return ind.Judge(prev, cur, scope)
}

// fixedWorkingSets are estimates a function gives, at no scan cost.
type fixedWorkingSets func(pid int) (WorkingSetEstimate, bool)

func (f fixedWorkingSets) Estimate(pid int) (WorkingSetEstimate, bool) { return f(pid) }
func (fixedWorkingSets) Stats() WorkingSetStats                        { return WorkingSetStats{} }
