package workload

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

// fakePaths names ids from a table; a removed id is gone.
type fakePaths struct {
	paths   map[uint64]string
	removed map[uint64]bool
}

func (f *fakePaths) Path(id uint64) (string, error) {
	if f.removed[id] {
		return "", ErrGone
	}
	p, ok := f.paths[id]
	if !ok {
		return "", ErrGone
	}
	return p, nil
}

func (f *fakePaths) Check(id uint64) bool { return !f.removed[id] && f.paths[id] != "" }

func faults(anon, file uint64, stall time.Duration) readout.CgroupCounters {
	var c readout.CgroupCounters
	c.MajorFaults[readout.Anon], c.MajorFaults[readout.File] = anon, file
	c.Stall.OffCPU = stall
	return c
}

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// 1,000 faulting cgroups give the top-K busiest, busiest first; a quiet
// one is not exported; rates are over the interval.
func TestTrackerTopK(t *testing.T) {
	paths := &fakePaths{paths: map[uint64]string{}, removed: map[uint64]bool{}}
	for i := range uint64(1000) {
		paths.paths[i+100] = fmt.Sprintf("/system.slice/svc-%04d.service", i)
	}
	paths.paths[5] = "/system.slice/quiet.service"
	tr := NewTracker(Config{TopK: 10, Paths: paths})
	counts := func(step uint64) map[uint64]readout.CgroupCounters {
		m := map[uint64]readout.CgroupCounters{5: faults(7, 0, 0)}
		for i := range uint64(1000) {
			m[i+100] = faults(step*i, 0, 0) // cgroup i faults i times a second
		}
		return m
	}
	if got := tr.Observe(t0, counts(0)); len(got) != 0 {
		t.Errorf("first sample: %d workloads, want none ranked before a rate", len(got))
	}
	var got []Workload
	for s := uint64(1); s <= 3; s++ {
		got = tr.Observe(t0.Add(time.Duration(s)*time.Second), counts(s))
	}
	if len(got) != 10 {
		t.Fatalf("%d workloads, want the top-K 10", len(got))
	}
	for i, w := range got {
		want := fmt.Sprintf("svc-%04d.service", 999-i)
		if w.Unit != want || w.Slice != "system.slice" || !w.HasRates || w.MajorFaultsPerSecond != float64(999-i) {
			t.Errorf("#%d: %s %s, %.0f faults/s (rates %v); want %s at %d/s", i, w.Cgroup, w.Unit, w.MajorFaultsPerSecond, w.HasRates, want, 999-i)
		}
	}
}

// A removed cgroup's workload goes, and the probe is told to forget it;
// folded at a depth, a removed member's counts stay in its ancestor's.
func TestTrackerRemovedAndFolded(t *testing.T) {
	pod := "/kubepods/burstable/pod3e1d7a2b-54c8-4f0e-9b1a-0c2d3e4f5a6b"
	paths := &fakePaths{paths: map[uint64]string{
		10: pod + "/" + fmt.Sprintf("%064x", 1), 11: pod + "/" + fmt.Sprintf("%064x", 2), 12: "/system.slice/db.service",
	}, removed: map[uint64]bool{}}
	var forgot []uint64
	tr := NewTracker(Config{TopK: 5, Depth: 3, Paths: paths, Forget: func(id uint64) { forgot = append(forgot, id) }})
	tr.Observe(t0, map[uint64]readout.CgroupCounters{10: faults(0, 0, 0), 11: faults(0, 0, 0), 12: faults(0, 0, 0)})
	got := tr.Observe(t0.Add(time.Second), map[uint64]readout.CgroupCounters{10: faults(100, 0, 0), 11: faults(50, 10, time.Second), 12: faults(30, 0, 0)})
	if len(got) != 2 || got[0].Cgroup != pod || got[0].PodUID == "" || got[0].ContainerID != "" || got[0].QoS != "burstable" {
		t.Fatalf("workloads %+v: want the pod (its two containers folded) first, then db", got)
	}
	if c := got[0].Counters; c.MajorFaults.Total() != 160 || c.Stall.Total() != time.Second || !slices.Equal(got[0].IDs, []uint64{10, 11}) {
		t.Errorf("pod: %d faults, %s stall, ids %v; want 160, 1s, [10 11]", c.MajorFaults.Total(), c.Stall.Total(), got[0].IDs)
	}
	if got[0].StallPercent != 100 {
		t.Errorf("pod stall %.0f %%, want 100 (1 s of stall in 1 s)", got[0].StallPercent)
	}

	// Container 11 is removed: the probe no longer counts it. The pod's
	// counter keeps its counts; db.service is removed too, and goes.
	paths.removed[11], paths.removed[12] = true, true
	got = tr.Observe(t0.Add(2*time.Second), map[uint64]readout.CgroupCounters{10: faults(200, 0, 0)})
	if len(got) != 1 || got[0].Cgroup != pod {
		t.Fatalf("after removals: %+v, want the pod alone", got)
	}
	if c := got[0].Counters.MajorFaults.Total(); c != 260 {
		t.Errorf("pod faults %d after a container went, want 260 (never going back)", c)
	}
	if !slices.Contains(forgot, 11) || !slices.Contains(forgot, 12) {
		t.Errorf("forgot %v, want 11 and 12 dropped from the probe's map", forgot)
	}

	// A cgroup whose removal shows first in a check, still in the map.
	paths.removed[10] = true
	for i := range checkEvery {
		got = tr.Observe(t0.Add(time.Duration(3+i)*time.Second), map[uint64]readout.CgroupCounters{10: faults(200, 0, 0)})
	}
	if len(got) != 0 || !slices.Contains(forgot, 10) {
		t.Errorf("a removed cgroup still in the map: %+v exported, forgot %v", got, forgot)
	}
}

func TestFold(t *testing.T) {
	for _, c := range []struct {
		path  string
		depth int
		want  string
	}{
		{"/a/b/c/d", 0, "/a/b/c/d"},
		{"/a/b/c/d", 2, "/a/b"},
		{"/a/b", 3, "/a/b"},
		{"/", 1, "/"},
	} {
		if got := fold(c.path, c.depth); got != c.want {
			t.Errorf("fold(%q, %d) = %q, want %q", c.path, c.depth, got, c.want)
		}
	}
}
