package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/workload"
)

// workloadLabels are every per-cgroup series' labels: the cgroup's path
// and what its shape says (package workload), empty where it says nothing,
// so that any of them joins (pod_uid on kube_pod_info's uid, unit on
// systemd's).
var workloadLabels = []string{"cgroup", "unit", "slice", "pod_uid", "container_id", "qos"}

// WorkloadCollector exports the busiest cgroups (the pipeline's top-K): a
// cgroup removed, or no longer among the busiest, is absent from the next
// scrape.
//
// A series carries only the labels its cgroup's path gives: cgroup always,
// and unit and slice, or pod_uid, qos and container_id, where the path has
// their shape. Prometheus reads a missing label as an empty one, so every
// query and join is the same, and a scrape's per-cgroup lines (most of a
// scrape on a busy host) are a quarter shorter to encode and compress. As
// the label names vary from cgroup to cgroup, it is an unchecked collector
// (it describes nothing). Each cgroup's label pairs are built once and kept
// while it is exported, not at every scrape.
type WorkloadCollector struct {
	src   Source
	m     *workloads
	mu    sync.Mutex // one scrape at a time uses the cache
	pairs pairCache[pairKey]
}

// NewWorkloadCollector builds every descriptor once.
func NewWorkloadCollector(src Source) *WorkloadCollector {
	return &WorkloadCollector{src: src, m: newWorkloads(), pairs: newPairCache[pairKey]()}
}

// Describe implements prometheus.Collector: nothing, as an unchecked
// collector.
func (c *WorkloadCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *WorkloadCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch, nil) }

func (c *WorkloadCollector) collect(ch chan<- prometheus.Metric, samples *slab[sample]) {
	t, ok := c.src.Latest()
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.update(t, newEmitter(ch, nil, samples), c.labelPairs)
	c.pairs.sweep()
}

// pairKey is one series shape: a cgroup's labels and the extra label
// (kind, event, type) a family adds, if any.
type pairKey struct {
	labels      workload.Labels
	name, value string
}

// labelPairs are the series' label pairs, sorted by name, the empty ones
// left out, each value valid UTF-8.
func (c *WorkloadCollector) labelPairs(l workload.Labels, name, value string) []*dto.LabelPair {
	return c.pairs.get(pairKey{l, name, value}, func() []*dto.LabelPair {
		values := labelsOf(l)
		p := make([]*dto.LabelPair, 0, len(values)+1)
		for i, n := range workloadLabels {
			p = append(p, pair(n, values[i]))
		}
		if name != "" {
			p = append(p, pair(name, value))
		}
		return nonEmpty(p)
	})
}

// pairsFunc gives a series' label pairs.
type pairsFunc func(l workload.Labels, name, value string) []*dto.LabelPair

// sample is one counter or gauge with label pairs built beforehand.
type sample struct {
	desc  *prometheus.Desc
	pairs []*dto.LabelPair
	vt    prometheus.ValueType
	v     float64
}

func (s sample) Desc() *prometheus.Desc { return s.desc }

func (s sample) Write(m *dto.Metric) error {
	m.Label = s.pairs
	if s.vt == prometheus.CounterValue {
		m.Counter = &dto.Counter{Value: proto.Float64(s.v)}
	} else {
		m.Gauge = &dto.Gauge{Value: proto.Float64(s.v)}
	}
	return nil
}

// cgroupLatencyStride keeps every second of the host histogram's bounds
// for a cgroup's: 12 buckets, powers of 4 from 4.1 µs to 17 s, each a bound
// of the host's too. A cgroup's histogram is repeated for each of the top-K
// workloads; with all 23 bounds the twenty workloads of a run were a third
// of a scrape's lines.
const cgroupLatencyStride = 2

// latencySample is a fault-latency histogram (the host's by kind, or a
// cgroup's) with label pairs built beforehand, every stride-th of the
// probe's bounds from firstLatencySlot to lastLatencySlot.
type latencySample struct {
	desc   *prometheus.Desc
	pairs  []*dto.LabelPair
	h      readout.Histogram
	stride int
}

func (s latencySample) Desc() *prometheus.Desc { return s.desc }

func (s latencySample) Write(m *dto.Metric) error {
	s.writeTo(m, nil)
	return nil
}

// writeTo writes the histogram with objects from a (nil: allocated).
func (s latencySample) writeTo(m *dto.Metric, a *arena) {
	m.Label = s.pairs
	h := a.histogram(s.h.Count(), s.h.SumSeconds)
	var cum uint64
	for i := 0; i <= lastLatencySlot && i < readout.LatencySlots; i++ {
		cum += s.h.Slots[i]
		if i >= firstLatencySlot && (i-firstLatencySlot)%s.stride == 0 {
			h.Bucket = append(h.Bucket, a.bucket(float64(uint64(1)<<(i+1))/1e9, cum))
		}
	}
	m.Histogram = h
}

// workloads are the per-cgroup series' descriptors.
type workloads struct {
	major, stall, stallOff, latency, lost, removedLost *prometheus.Desc
	// From the cgroup's own files.
	pressure, events, refaults, activations, pgmajfault *prometheus.Desc
	current, swap, max, high, limit                     *prometheus.Desc
	state                                               *prometheus.Desc
}

func newWorkloads() *workloads {
	with := func(extra ...string) []string { return append(append([]string(nil), workloadLabels...), extra...) }
	return &workloads{
		major:       desc("cgroup_major_faults_total", "Major page faults of the tasks in the cgroup, by kind (as process_major_faults_total), from the BPF probe since it first saw the cgroup fault or stall; every task counts, not only the top-K processes.", with("kind")...),
		stall:       desc("cgroup_memory_stall_seconds_total", "Time the cgroup's tasks spent in a memory stall as PSI counts it (in_memstall set, on CPU or off), summed over tasks, from the BPF probe.", with()...),
		stallOff:    desc("cgroup_memory_stall_off_cpu_seconds_total", "The part of cgroup_memory_stall_seconds_total spent off CPU.", with()...),
		latency:     desc("cgroup_major_fault_latency_seconds", "Service time of the cgroup's major faults, all kinds, from fault entry to the kernel accounting it as major (BPF); timed while the host takes major faults.", with()...),
		lost:        desc("cgroup_events_lost_total", "Faults and stalls not counted per cgroup because the probe's cgroup map was full (2,048 live cgroups at once; a removed cgroup leaves it as the kernel removes it).", nil...),
		removedLost: desc("cgroup_removed_lost_total", "Removed cgroups whose faults and stalls since the previous sample were not counted: the queue that hands a removed cgroup's last counts to the observer was full (4,096 removals in one sample).", nil...),

		pressure:    desc("cgroup_pressure_memory_stalled_seconds_total", "The cgroup's own memory.pressure totals: some (at least one task stalled on memory) and full (all non-idle tasks at once).", with("kind")...),
		events:      desc("cgroup_memory_events_total", "The cgroup's memory.events: high (throttled over memory.high), max (at memory.max), oom, oom_kill; on cgroup v1, max is memory.failcnt and oom_kill memory.oom_control's.", with("event")...),
		refaults:    desc("cgroup_workingset_refaults_total", "memory.stat workingset_refault_anon/_file of the cgroup (v1: total_workingset_refault_*): evicted pages faulted back while still in the working set.", with("type")...),
		activations: desc("cgroup_workingset_activations_total", "memory.stat workingset_activate_anon/_file of the cgroup: refaulted pages activated at once (cgroup v2 only).", with("type")...),
		pgmajfault:  desc("cgroup_memory_stat_major_faults_total", "memory.stat pgmajfault of the cgroup (v1: total_pgmajfault), the kernel's own count beside cgroup_major_faults_total.", with()...),
		current:     desc("cgroup_memory_current_bytes", "memory.current (v1: memory.usage_in_bytes).", with()...),
		swap:        desc("cgroup_memory_swap_current_bytes", "memory.swap.current (v1: memsw.usage_in_bytes less usage_in_bytes).", with()...),
		max:         desc("cgroup_memory_max_bytes", "memory.max (v1: limit_in_bytes); absent when unlimited.", with()...),
		high:        desc("cgroup_memory_high_bytes", "memory.high; absent when unlimited, and on cgroup v1.", with()...),
		limit:       desc("cgroup_memory_limit_bytes", "The memory limit the cgroup lives under: the tightest memory.max of it and its ancestors (v1: memory.stat hierarchical_memory_limit); absent when none.", with()...),
		state:       desc("cgroup_thrashing_state", "The workload's detector: 0 normal, 1 monitoring, 2 thrashing. Thrashing while its tasks take --detector.pf-high major faults/s or more (all kinds) and its memory.pressure full share is --detector.psi-full or more; over once either falls below its low mark. Thrashing too while the host detector is and two or more of its high-fault processes are in the workload (TPF's rule, before PSI counts the pages read back).", with()...),
	}
}

func (m *workloads) update(t *pipeline.Tick, out *emitter, pairs pairsFunc) {
	s := t.Reading
	if s.Cgroups == nil || !s.OK(sampler.SourceProbes) {
		return // off, or the maps failed to read: nothing is sent as 0
	}
	out.sample(m.lost, nil, prometheus.CounterValue, float64(s.CgroupEventsLost))
	out.sample(m.removedLost, nil, prometheus.CounterValue, float64(s.RemovedCgroupsLost))
	for _, w := range t.Workloads {
		l := w.Labels
		base := pairs(l, "", "")
		for i, kind := range readout.Kinds {
			if skipKind(kind, w.Counters.MajorFaults[i], true) {
				continue
			}
			out.sample(m.major, pairs(l, "kind", kind), prometheus.CounterValue, float64(w.Counters.MajorFaults[i]))
		}
		out.sample(m.stall, base, prometheus.CounterValue, w.Counters.Stall.Total().Seconds())
		out.sample(m.stallOff, base, prometheus.CounterValue, w.Counters.Stall.OffCPU.Seconds())
		out.ch <- latencySample{m.latency, base, w.Counters.Latency, cgroupLatencyStride}
		m.kernel(out, w, base, pairs)
		if w.HasRates {
			out.sample(m.state, base, prometheus.GaugeValue, float64(w.State))
		}
	}
}

// kernel exports what the cgroup's own files said; a reading left out is
// absent, never 0.
func (m *workloads) kernel(out *emitter, w workload.Workload, base []*dto.LabelPair, pairs pairsFunc) {
	if !w.HasKernel {
		return
	}
	k, l := w.Kernel, w.Labels
	counter := func(d *prometheus.Desc, name, value string, v float64) {
		out.sample(d, pairs(l, name, value), prometheus.CounterValue, v)
	}
	if k.HasPressure {
		counter(m.pressure, "kind", "some", k.Pressure.Some.Seconds())
		counter(m.pressure, "kind", "full", k.Pressure.Full.Seconds())
	}
	for _, e := range workload.Events {
		if n, ok := k.Events[e]; ok {
			counter(m.events, "event", e, float64(n))
		}
	}
	for _, t := range workload.Types {
		if n, ok := k.Refaults[t]; ok {
			counter(m.refaults, "type", t, float64(n))
		}
		if n, ok := k.Activations[t]; ok {
			counter(m.activations, "type", t, float64(n))
		}
	}
	if k.HasMajorFaults {
		out.sample(m.pgmajfault, base, prometheus.CounterValue, float64(k.MajorFaults))
	}
	for _, g := range []struct {
		d *prometheus.Desc
		v int64
	}{{m.current, k.CurrentBytes}, {m.swap, k.SwapBytes}, {m.max, k.MaxBytes}, {m.high, k.HighBytes}, {m.limit, k.LimitBytes}} {
		if g.v >= 0 {
			out.sample(g.d, base, prometheus.GaugeValue, float64(g.v))
		}
	}
}

func labelsOf(l workload.Labels) []string {
	return []string{l.Cgroup, l.Unit, l.Slice, l.PodUID, l.ContainerID, l.QoS}
}
