package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// Latency buckets: log2 slots 11..33, so upper bounds from 4.1 µs to 17 s.
// A page-cache hit that still counts as major sits near the bottom, a disk
// read in the middle, a fault stuck behind reclaim at the top.
const (
	firstLatencySlot = 11
	lastLatencySlot  = 33
)

type probes struct {
	up, lost, latency *prometheus.Desc
}

func newProbes() *probes {
	return &probes{
		up:      desc("probe_up", "1 when the BPF probe is loaded and attached, 0 when it failed or thrashscope runs on procfs alone.", "probe"),
		lost:    desc("probe_events_lost_total", "Kernel events a probe could not count: a full map, a missing fault start, or events the kernel did not hand to the program.", "probe"),
		latency: desc("major_fault_latency_seconds", "Major-fault service time, from fault entry to the kernel accounting it as major (BPF). Timed while the host takes major faults: the first ones after 30 s of calm go untimed.", "kind"),
	}
}

func (m *probes) describe(ch chan<- *prometheus.Desc) {
	ch <- m.up
	ch <- m.lost
	ch <- m.latency
}

func (m *probes) update(s *sampler.Sample, ch chan<- prometheus.Metric) {
	up := make(map[string]bool, len(s.Probes))
	for _, st := range s.Probes {
		up[st.Name] = st.Attached
	}
	for _, name := range probe.Names {
		v := 0.0
		if up[name] {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, v, name)
	}
	if len(s.Probes) == 0 {
		return
	}
	for _, name := range probe.Names {
		ch <- prometheus.MustNewConstMetric(m.lost, prometheus.CounterValue, float64(s.Lost[name]), name)
	}
	for _, kind := range []string{probe.KindAnon, probe.KindFile} {
		h := s.Latency[kind]
		ch <- prometheus.MustNewConstHistogram(m.latency, h.Count(), h.SumSeconds,
			h.CumulativeBuckets(firstLatencySlot, lastLatencySlot), kind)
	}
}
