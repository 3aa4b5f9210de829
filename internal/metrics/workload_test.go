package metrics

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/workload"
)

// The workloads' series carry the join labels their cgroup's path gives and
// no empty ones, one series per kind seen; a hostile cgroup name (invalid
// UTF-8, quotes and a newline, 4,000 bytes) keeps every other series in the
// scrape.
func TestWorkloadSeries(t *testing.T) {
	s := &sampler.Reading{Cgroups: map[uint64]readout.CgroupCounters{}, CgroupEventsLost: 3}
	s.Used[sampler.SourceProbes] = true
	uid := "3e1d7a2b-54c8-4f0e-9b1a-0c2d3e4f5a6b"
	var pod readout.CgroupCounters
	pod.MajorFaults[readout.Anon], pod.MajorFaults[readout.File] = 120, 30
	pod.Stall = readout.StallTime{OffCPU: 2 * time.Second, Reclaim: time.Second}
	pod.Latency.Slots[20] = 150
	pod.Latency.SumSeconds = 0.15
	kernel := workload.Kernel{
		Pressure: workload.Pressure{Some: 3 * time.Second, Full: 2 * time.Second}, HasPressure: true,
		Events:   map[string]uint64{"high": 4, "max": 2, "oom": 0, "oom_kill": 0},
		Refaults: map[string]uint64{"anon": 100, "file": 50}, Activations: map[string]uint64{"anon": 10, "file": 5},
		MajorFaults: 150, HasMajorFaults: true, CurrentBytes: 64 << 20, SwapBytes: 32 << 20, MaxBytes: 64 << 20, HighBytes: -1, LimitBytes: 64 << 20,
	}
	tick := &pipeline.Tick{Reading: s, Workloads: []workload.Workload{
		{Labels: workload.Parse("/kubepods/burstable/pod" + uid), Counters: pod, Kernel: kernel, HasKernel: true, HasRates: true, State: 2},
		{Labels: workload.Parse("/system.slice/evil\"} 1\nthrashscope_fake 1\n\xff" + strings.Repeat("x", 4000) + ".service"), Counters: pod},
		{Labels: workload.Parse("/system.slice/db.service"), Counters: pod},
	}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewWorkloadCollector(fixedSource{tick}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	series := map[string]int{}
	var podFaults map[string]float64
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "thrashscope_cgroup_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			series[mf.GetName()]++
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
				if l.GetValue() == "" {
					t.Errorf("%s has an empty label %s: a cgroup's series leave out what its path does not give", mf.GetName(), l.GetName())
				}
			}
			if labels["cgroup"] == "/system.slice/db.service" && (labels["unit"] != "db.service" || labels["slice"] != "system.slice" || len(labels) > 4) {
				t.Errorf("%s of db.service: labels %v, want cgroup, unit, slice and at most the family's own", mf.GetName(), labels)
			}
			if mf.GetName() == "thrashscope_cgroup_major_faults_total" && labels["pod_uid"] == uid {
				if podFaults == nil {
					podFaults = map[string]float64{}
				}
				podFaults[labels["kind"]] = m.GetCounter().GetValue()
				if labels["qos"] != "burstable" || labels["cgroup"] != "/kubepods/burstable/pod"+uid {
					t.Errorf("pod labels %v", labels)
				}
			}
		}
	}
	if podFaults["anon"] != 120 || podFaults["file"] != 30 || podFaults["shmem"] != 0 || len(podFaults) != 3 {
		t.Errorf("pod faults by kind %v, want anon 120, shmem 0, file 30, and no unknown (none happened)", podFaults)
	}
	for name, want := range map[string]int{
		"thrashscope_cgroup_memory_stall_seconds_total":         3,
		"thrashscope_cgroup_memory_stall_off_cpu_seconds_total": 3,
		"thrashscope_cgroup_major_fault_latency_seconds":        3,
		"thrashscope_cgroup_events_lost_total":                  1,
		// the pod's own files and its detector; the others' not read
		"thrashscope_cgroup_pressure_memory_stalled_seconds_total": 2,
		"thrashscope_cgroup_memory_events_total":                   4,
		"thrashscope_cgroup_workingset_refaults_total":             2,
		"thrashscope_cgroup_workingset_activations_total":          2,
		"thrashscope_cgroup_memory_stat_major_faults_total":        1,
		"thrashscope_cgroup_memory_current_bytes":                  1,
		"thrashscope_cgroup_memory_swap_current_bytes":             1,
		"thrashscope_cgroup_memory_max_bytes":                      1,
		"thrashscope_cgroup_memory_high_bytes":                     0, // unlimited
		"thrashscope_cgroup_memory_limit_bytes":                    1,
		"thrashscope_cgroup_thrashing_state":                       1,
	} {
		if series[name] != want {
			t.Errorf("%s: %d series, want %d (the hostile name's among them)", name, series[name], want)
		}
	}
}

// The label pairs are built once per cgroup and kept while it is exported:
// a scrape without it drops them, and the values follow each tick.
func TestWorkloadLabelPairsFollowTheTicks(t *testing.T) {
	s := &sampler.Reading{Cgroups: map[uint64]readout.CgroupCounters{}}
	s.Used[sampler.SourceProbes] = true
	var c readout.CgroupCounters
	c.MajorFaults[readout.Anon] = 7
	a := workload.Workload{Labels: workload.Parse("/system.slice/a.service"), Counters: c}
	b := workload.Workload{Labels: workload.Parse("/system.slice/b.service"), Counters: c}
	src := &fixedSource{&pipeline.Tick{Reading: s, Workloads: []workload.Workload{a, b}}}
	col := NewWorkloadCollector(src)
	reg := prometheus.NewRegistry()
	reg.MustRegister(col)
	scrape := func() string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mf := range mfs {
			if mf.GetName() != "thrashscope_cgroup_major_faults_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				var ls []string
				for _, l := range m.GetLabel() {
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
				if slices.Contains(ls, "kind=anon") {
					out = append(out, fmt.Sprintf("%s %g", strings.Join(ls, ","), m.GetCounter().GetValue()))
				}
			}
		}
		return strings.Join(out, "; ")
	}
	want := "cgroup=/system.slice/a.service,kind=anon,slice=system.slice,unit=a.service 7; cgroup=/system.slice/b.service,kind=anon,slice=system.slice,unit=b.service 7"
	if got := scrape(); got != want {
		t.Errorf("first scrape %q, want %q", got, want)
	}
	kept := len(col.pairs.pairs)
	a.Counters.MajorFaults[readout.Anon] = 9
	src.t = &pipeline.Tick{Reading: s, Workloads: []workload.Workload{a}}
	if got, want := scrape(), "cgroup=/system.slice/a.service,kind=anon,slice=system.slice,unit=a.service 9"; got != want {
		t.Errorf("after b left the top-K: %q, want %q", got, want)
	}
	if len(col.pairs.pairs) >= kept || len(col.pairs.pairs) == 0 {
		t.Errorf("%d label-pair shapes kept after b left (%d before), want a's alone", len(col.pairs.pairs), kept)
	}
}

// A cgroup's latency histogram keeps every second bound of the host's: its
// buckets count what the host's count at the same bounds, and its count
// and sum are the whole histogram's (slots below the first bound and above
// the last included).
func TestCgroupLatencyBuckets(t *testing.T) {
	var h readout.Histogram
	for i := range h.Slots {
		h.Slots[i] = uint64(i + 1)
	}
	h.SumSeconds = 42
	var m dto.Metric
	if err := (latencySample{h: h, stride: cgroupLatencyStride}).Write(&m); err != nil {
		t.Fatal(err)
	}
	host := h.CumulativeBuckets(firstLatencySlot, lastLatencySlot)
	got := m.GetHistogram()
	if n := len(got.GetBucket()); n != 12 {
		t.Errorf("%d buckets, want 12 (powers of 4 from 4.1 µs to 17 s)", n)
	}
	prev := 0.0
	for _, b := range got.GetBucket() {
		ub := b.GetUpperBound()
		want, ok := host[ub]
		if !ok {
			t.Errorf("bound %g s is not one of the host histogram's", ub)
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%g: %d, want the host's %d", ub, b.GetCumulativeCount(), want)
		}
		if prev > 0 && ub != 4*prev {
			t.Errorf("bound %g s after %g s, want four times it", ub, prev)
		}
		prev = ub
	}
	if got.GetSampleCount() != h.Count() || got.GetSampleSum() != 42 {
		t.Errorf("count %d sum %g, want %d and 42", got.GetSampleCount(), got.GetSampleSum(), h.Count())
	}
	if first, last := got.GetBucket()[0].GetUpperBound(), prev; first != 4096e-9 || last != float64(uint64(1)<<34)/1e9 {
		t.Errorf("bounds %g to %g s, want 4.096 µs to 17.2 s", first, last)
	}
}
