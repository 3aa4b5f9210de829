package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
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
	up, lost, latency, runs, runTime *prometheus.Desc
}

func newProbes() *probes {
	return &probes{
		up:      desc("probe_up", "1 when the BPF probe is loaded and attached, 0 when it failed or thrashscope runs on procfs alone; way is how its programs reach the kernel's data (fast: Linux 5.17+; portable: older kernels, or --probes.way=portable), empty on procfs alone.", "probe", "way"),
		lost:    desc("probe_events_lost_total", "Kernel events a probe could not count: a full map, a missing fault start, or events the kernel did not hand to the program.", "probe"),
		latency: desc("major_fault_latency_seconds", "Major-fault service time, from fault entry to the kernel accounting it as major (BPF). Timed while the host takes major faults: the first ones after 30 s of calm go untimed.", "kind"),
		runs:    desc("probe_program_runs_total", "Runs of each of thrashscope's BPF programs, as the kernel counts them while BPF statistics are on (sysctl kernel.bpf_stats_enabled=1); absent until they have been.", "program"),
		runTime: desc("probe_program_run_seconds_total", "Kernel-measured run time of each of thrashscope's BPF programs while BPF statistics are on (sysctl kernel.bpf_stats_enabled=1): what the probes cost the host, per run when divided by probe_program_runs_total.", "program"),
	}
}

func (m *probes) describe(ch chan<- *prometheus.Desc) {
	ch <- m.up
	ch <- m.lost
	ch <- m.latency
	ch <- m.runs
	ch <- m.runTime
}

func (m *probes) update(t *pipeline.Tick, out *emitter) {
	s := t.Reading
	up := make(map[string]readout.Status, len(s.Probes))
	for _, st := range s.Probes {
		up[st.Name] = st
	}
	for _, name := range readout.Names {
		v := 0.0
		if up[name].Attached {
			v = 1
		}
		out.send(m.up, prometheus.GaugeValue, v, name, up[name].Way)
	}
	if len(s.Probes) == 0 || !s.OK(sampler.SourceProbes) {
		return // procfs alone, or the maps failed to read: no counter is sent as 0
	}
	for _, name := range readout.Names {
		out.send(m.lost, prometheus.CounterValue, float64(s.Lost[name]), name)
	}
	for _, kind := range []string{readout.KindAnon, readout.KindShmem, readout.KindFile} {
		out.ch <- latencySample{m.latency, out.pairs(m.latency, kind), s.Latency[kind], 1}
	}
	if !slices.ContainsFunc(s.Programs, func(p readout.ProgramStats) bool { return p.Runs > 0 }) {
		return // statistics never on: zeros would read as free
	}
	for _, p := range s.Programs {
		out.send(m.runs, prometheus.CounterValue, float64(p.Runs), p.Name)
		out.send(m.runTime, prometheus.CounterValue, p.RunTime.Seconds(), p.Name)
	}
}
