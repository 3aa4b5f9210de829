package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

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

// workloads exports the busiest cgroups (the pipeline's top-K): a cgroup
// removed, or no longer among the busiest, is absent from the next scrape.
type workloads struct {
	major, stall, stallOff, latency, lost *prometheus.Desc
	// From the cgroup's own files.
	pressure, events, refaults, activations, pgmajfault *prometheus.Desc
	current, swap, max, high, limit                     *prometheus.Desc
	state                                               *prometheus.Desc
}

func newWorkloads() *workloads {
	with := func(extra ...string) []string { return append(append([]string(nil), workloadLabels...), extra...) }
	return &workloads{
		major:    desc("cgroup_major_faults_total", "Major page faults of the tasks in the cgroup, by kind (as process_major_faults_total), from the BPF probe since it first saw the cgroup fault or stall; every task counts, not only the top-K processes.", with("kind")...),
		stall:    desc("cgroup_memory_stall_seconds_total", "Time the cgroup's tasks spent in a memory stall as PSI counts it (in_memstall set, on CPU or off), summed over tasks, from the BPF probe.", with()...),
		stallOff: desc("cgroup_memory_stall_off_cpu_seconds_total", "The part of cgroup_memory_stall_seconds_total spent off CPU.", with()...),
		latency:  desc("cgroup_major_fault_latency_seconds", "Service time of the cgroup's major faults, all kinds, from fault entry to the kernel accounting it as major (BPF); timed while the host takes major faults.", with()...),
		lost:     desc("cgroup_events_lost_total", "Faults and stalls not counted per cgroup because the probe's cgroup map was full (2,048 live cgroups at once).", nil...),

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
		state:       desc("cgroup_thrashing_state", "The workload's detector: 0 normal, 1 monitoring, 2 thrashing. Thrashing while its tasks take --detector.pf-high major faults/s or more (all kinds) and its memory.pressure full share is --detector.psi-full or more; over once either falls below its low mark.", with()...),
	}
}

func (m *workloads) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.major, m.stall, m.stallOff, m.latency, m.lost,
		m.pressure, m.events, m.refaults, m.activations, m.pgmajfault, m.current, m.swap, m.max, m.high, m.limit, m.state} {
		ch <- d
	}
}

func (m *workloads) update(t *pipeline.Tick, ch chan<- prometheus.Metric) {
	s := t.Reading
	if s.Cgroups == nil || !s.OK(sampler.SourceProbes) {
		return // off, or the maps failed to read: nothing is sent as 0
	}
	send(ch, m.lost, prometheus.CounterValue, float64(s.CgroupEventsLost))
	for _, w := range t.Workloads {
		labels := labelsOf(w.Labels)
		with := func(extra string) []string { return append(append([]string(nil), labels...), extra) }
		for i, kind := range readout.Kinds {
			if skipKind(kind, w.Counters.MajorFaults[i], true) {
				continue
			}
			send(ch, m.major, prometheus.CounterValue, float64(w.Counters.MajorFaults[i]), with(kind)...)
		}
		send(ch, m.stall, prometheus.CounterValue, w.Counters.Stall.Total().Seconds(), labels...)
		send(ch, m.stallOff, prometheus.CounterValue, w.Counters.Stall.OffCPU.Seconds(), labels...)
		h := w.Counters.Latency
		hm, err := prometheus.NewConstHistogram(m.latency, h.Count(), h.SumSeconds, h.CumulativeBuckets(firstLatencySlot, lastLatencySlot), labels...)
		if err != nil {
			hm = prometheus.NewInvalidMetric(m.latency, err)
		}
		ch <- hm
		m.kernel(ch, w, labels)
		if w.HasRates {
			send(ch, m.state, prometheus.GaugeValue, float64(w.State), labels...)
		}
	}
}

// kernel exports what the cgroup's own files said; a reading left out is
// absent, never 0.
func (m *workloads) kernel(ch chan<- prometheus.Metric, w workload.Workload, labels []string) {
	if !w.HasKernel {
		return
	}
	k := w.Kernel
	with := func(extra string) []string { return append(append([]string(nil), labels...), extra) }
	if k.HasPressure {
		send(ch, m.pressure, prometheus.CounterValue, k.Pressure.Some.Seconds(), with("some")...)
		send(ch, m.pressure, prometheus.CounterValue, k.Pressure.Full.Seconds(), with("full")...)
	}
	for _, e := range workload.Events {
		if n, ok := k.Events[e]; ok {
			send(ch, m.events, prometheus.CounterValue, float64(n), with(e)...)
		}
	}
	for _, t := range workload.Types {
		if n, ok := k.Refaults[t]; ok {
			send(ch, m.refaults, prometheus.CounterValue, float64(n), with(t)...)
		}
		if n, ok := k.Activations[t]; ok {
			send(ch, m.activations, prometheus.CounterValue, float64(n), with(t)...)
		}
	}
	if k.HasMajorFaults {
		send(ch, m.pgmajfault, prometheus.CounterValue, float64(k.MajorFaults), labels...)
	}
	for _, g := range []struct {
		d *prometheus.Desc
		v int64
	}{{m.current, k.CurrentBytes}, {m.swap, k.SwapBytes}, {m.max, k.MaxBytes}, {m.high, k.HighBytes}, {m.limit, k.LimitBytes}} {
		if g.v >= 0 {
			send(ch, g.d, prometheus.GaugeValue, float64(g.v), labels...)
		}
	}
}

func labelsOf(l workload.Labels) []string {
	return []string{l.Cgroup, l.Unit, l.Slice, l.PodUID, l.ContainerID, l.QoS}
}
