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
}

func newWorkloads() *workloads {
	with := func(extra ...string) []string { return append(append([]string(nil), workloadLabels...), extra...) }
	return &workloads{
		major:    desc("cgroup_major_faults_total", "Major page faults of the tasks in the cgroup, by kind (as process_major_faults_total), from the BPF probe since it first saw the cgroup fault or stall; every task counts, not only the top-K processes.", with("kind")...),
		stall:    desc("cgroup_memory_stall_seconds_total", "Time the cgroup's tasks spent in a memory stall as PSI counts it (in_memstall set, on CPU or off), summed over tasks, from the BPF probe.", with()...),
		stallOff: desc("cgroup_memory_stall_off_cpu_seconds_total", "The part of cgroup_memory_stall_seconds_total spent off CPU.", with()...),
		latency:  desc("cgroup_major_fault_latency_seconds", "Service time of the cgroup's major faults, all kinds, from fault entry to the kernel accounting it as major (BPF); timed while the host takes major faults.", with()...),
		lost:     desc("cgroup_events_lost_total", "Faults and stalls not counted per cgroup because the probe's cgroup map was full (2,048 live cgroups at once).", nil...),
	}
}

func (m *workloads) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.major, m.stall, m.stallOff, m.latency, m.lost} {
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
	}
}

func labelsOf(l workload.Labels) []string {
	return []string{l.Cgroup, l.Unit, l.Slice, l.PodUID, l.ContainerID, l.QoS}
}
