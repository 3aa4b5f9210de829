package workload

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
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

func (f *fakePaths) Drop(uint64) {}

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

// A read that misses some of a cgroup's counts on their way into the map
// holds the workload's counters where they were; they never go back.
func TestTrackerCountersNeverGoBack(t *testing.T) {
	paths := &fakePaths{paths: map[uint64]string{7: "/system.slice/db.service"}, removed: map[uint64]bool{}}
	tr := NewTracker(Config{TopK: 5, Paths: paths})
	var got []Workload
	for i, n := range []uint64{100, 250, 240, 400} {
		got = tr.Observe(t0.Add(time.Duration(i)*time.Second), map[uint64]readout.CgroupCounters{7: faults(n, 0, time.Duration(n))})
		if i == 2 && (len(got) != 1 || got[0].Counters.MajorFaults.Total() != 250 || got[0].Counters.Stall.Total() != 250) {
			t.Fatalf("after a read 10 short: %+v, want the counters held at 250", got)
		}
	}
	if len(got) != 1 || got[0].Counters.MajorFaults.Total() != 400 || got[0].MajorFaultsPerSecond != 150 {
		t.Errorf("after catching up: %+v, want 400 faults at 150/s", got)
	}
}

// A cgroup whose faults all fell between two samples, first seen with
// them, is a busy workload at once: the probes count a cgroup from zero.
func TestTrackerBurstBetweenSamples(t *testing.T) {
	paths := &fakePaths{paths: map[uint64]string{7: "/system.slice/batch.service"}, removed: map[uint64]bool{}}
	tr := NewTracker(Config{TopK: 5, Paths: paths})
	tr.Observe(t0, map[uint64]readout.CgroupCounters{})
	got := tr.Observe(t0.Add(2*time.Second), map[uint64]readout.CgroupCounters{7: faults(0, 500, 0)})
	if len(got) != 1 || !got[0].HasRates || got[0].MajorFaultsPerSecond != 250 {
		t.Fatalf("%+v: want batch.service at 250 faults/s", got)
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

// An exported workload's own cgroup files are read each sample: its PSI
// shares over the interval, and its detector on its faults and PSI full.
func TestTrackerKernelAndDetector(t *testing.T) {
	dir := t.TempDir()
	writePressure := func(someUS, fullUS int) {
		text := fmt.Sprintf("some avg10=0 avg60=0 avg300=0 total=%d\nfull avg10=0 avg60=0 avg300=0 total=%d\n", someUS, fullUS)
		if err := os.WriteFile(filepath.Join(dir, "memory.pressure"), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	paths := &fakePaths{paths: map[uint64]string{7: "/system.slice/db.service"}, removed: map[uint64]bool{}}
	var asked string
	tr := NewTracker(Config{TopK: 5, Paths: paths, Files: func(p string) Files { asked = p; return Files{V2: dir} }})
	step := func(sec int, faultsSoFar uint64, someUS, fullUS int) Workload {
		t.Helper()
		writePressure(someUS, fullUS)
		got := tr.Observe(t0.Add(time.Duration(sec)*time.Second), map[uint64]readout.CgroupCounters{7: faults(faultsSoFar, 0, 0)})
		if len(got) != 1 {
			t.Fatalf("t=%d: %d workloads", sec, len(got))
		}
		return got[0]
	}
	writePressure(0, 0)
	tr.Observe(t0, map[uint64]readout.CgroupCounters{7: faults(0, 0, 0)}) // no rates yet: none ranked
	w := step(1, 500, 400_000, 300_000)                                   // first read of its pressure: no share yet
	if asked != "/system.slice/db.service" || !w.Kernel.HasPressure || w.HasPSIRates || w.State != indicators.Monitoring {
		t.Errorf("t=1: asked %q, pressure %v, rates %v, state %d; want db's files read, no share yet, monitoring on its faults", asked, w.Kernel.HasPressure, w.HasPSIRates, w.State)
	}
	w = step(2, 1000, 1_200_000, 900_000)
	if !w.HasPSIRates || math.Abs(w.PSISomePercent-80) > 1e-6 || math.Abs(w.PSIFullPercent-60) > 1e-6 || w.State != indicators.Thrashing {
		t.Errorf("t=2: PSI some %.1f %% full %.1f %% (rates %v), state %d; want 80 %%, 60 %%, thrashing", w.PSISomePercent, w.PSIFullPercent, w.HasPSIRates, w.State)
	}
	if len(w.Reasons) != 2 {
		t.Errorf("reasons %v, want faults and pressure", w.Reasons)
	}
	w = step(3, 1000, 1_200_000, 900_000) // quiet
	if w.State != indicators.Normal {
		t.Errorf("t=3 quiet: state %d, want normal", w.State)
	}
}

// The thrashing host's high-fault processes name their workload at once,
// before its PSI rises: two of a run's consumers (folded into the run at
// depth 1) make the run thrash; one alone, in another group, does not; a
// process gone meanwhile counts nowhere.
func TestHostThrashersNameTheirWorkload(t *testing.T) {
	proc := t.TempDir()
	for pid, group := range map[int]string{101: "/run-a/consumer-00", 102: "/run-a/consumer-01", 201: "/svc-b"} {
		dir := filepath.Join(proc, fmt.Sprint(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("4:memory:/elsewhere\n0::"+group+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	paths := &fakePaths{paths: map[uint64]string{1: "/run-a/consumer-00", 2: "/run-a/consumer-01", 3: "/svc-b"}, removed: map[uint64]bool{}}
	tr := NewTracker(Config{TopK: 5, Depth: 1, Paths: paths, ProcRoot: proc})
	tr.Observe(t0, map[uint64]readout.CgroupCounters{1: faults(0, 0, 0), 2: faults(0, 0, 0), 3: faults(0, 0, 0)})
	// 120 faults/s each, no stall: PSI alone would say monitoring.
	got := tr.ObserveWith(t0.Add(time.Second), map[uint64]readout.CgroupCounters{1: faults(60, 0, 0), 2: faults(60, 0, 0), 3: faults(120, 0, 0)}, []int{101, 102, 201, 999})
	states := map[string]int{}
	for _, w := range got {
		states[w.Cgroup] = w.State
	}
	if states["/run-a"] != indicators.Thrashing || states["/svc-b"] != indicators.Monitoring {
		t.Errorf("states %v: want /run-a thrashing (two of the host's high-fault set), /svc-b monitoring (one)", states)
	}
	// The host no longer thrashes: without PSI, the run is back to watching.
	got = tr.Observe(t0.Add(2*time.Second), map[uint64]readout.CgroupCounters{1: faults(120, 0, 0), 2: faults(120, 0, 0), 3: faults(240, 0, 0)})
	for _, w := range got {
		if w.Cgroup == "/run-a" && w.State != indicators.Monitoring {
			t.Errorf("/run-a %v after the host's thrash: want monitoring", w.State)
		}
	}
}
