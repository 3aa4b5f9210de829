package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
)

// detector exports the indicators' host-wide verdict.
type detector struct {
	state, high, ratio, transitions, scan, wakes *prometheus.Desc
}

func newDetector() *detector {
	return &detector{
		state:       desc("thrashing_state", "The thrash detector's state: 0 normal, 1 monitoring (two or more high-fault processes), 2 thrashing (and CPU starved or PSI memory full high, with the host evicting pages; --detector.eviction)."),
		high:        desc("high_fault_processes", "Processes in the high-fault set (above --detector.pf-high faults/s, until below --detector.pf-low)."),
		ratio:       desc("working_set_ratio", "The tracked processes' demand (their working sets in their own time, process_working_set_demand_bytes) over the memory available to them (the run cgroup's limit for a run's consumers); above 1 they cannot all fit."),
		transitions: desc("detector_transitions_total", "Detector transitions, by the state entered.", "to"),
		scan:        desc("working_set_scan_seconds_total", "Time the working-set estimator has spent clearing and reading accessed bits."),
		wakes:       desc("sampler_wakes_total", "Samples taken before their interval was up because memory trouble began (--sample.wake: the probes' wakes, or a PSI trigger on procfs alone), while the detector was not yet thrashing."),
	}
}

func (m *detector) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.state, m.high, m.ratio, m.transitions, m.scan, m.wakes} {
		ch <- d
	}
}

func (m *detector) update(t *pipeline.Tick, out *emitter) {
	s := t.Verdict
	if s == nil {
		return
	}
	out.send(m.state, prometheus.GaugeValue, float64(s.State))
	out.send(m.high, prometheus.GaugeValue, float64(s.HighFaultCount))
	if s.HasWorkingSetRatio {
		out.send(m.ratio, prometheus.GaugeValue, s.WorkingSetRatio)
	}
	for state, to := range indicators.StateNames { // each from 0
		out.send(m.transitions, prometheus.CounterValue, float64(s.Transitions[state]), to)
	}
	out.send(m.scan, prometheus.CounterValue, s.WorkingSetScanSeconds)
	out.send(m.wakes, prometheus.CounterValue, float64(t.Wakes))
}
