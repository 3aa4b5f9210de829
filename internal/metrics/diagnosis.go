package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
)

// DiagnosisSource is what the diagnosis metrics read: the open diagnoses,
// and the CPU time the diagnoses took so far.
type DiagnosisSource interface {
	Open() []diagnosis.Diagnosis
	CPUSeconds() float64
}

// DiagnosisCollector exports one shortfall gauge and one info series per
// open diagnosis, and nothing once it closes: the series are bounded by
// the thrashes going on.
type DiagnosisCollector struct {
	src                  DiagnosisSource
	shortfall, info, cpu *prometheus.Desc
}

// NewDiagnosisCollector builds the diagnosis metrics.
func NewDiagnosisCollector(src DiagnosisSource) *DiagnosisCollector {
	return &DiagnosisCollector{
		src: src,
		shortfall: desc("diagnosis_shortfall_bytes", "How much more memory the limit that binds a thrashing group (or the host) would need to hold its working set, "+
			"per open diagnosis (cgroup: the workload's cgroup2 path, as on its cgroup_* series; empty for the host); GET /api/v1/diagnoses has its interval.", "group", "cgroup", "kind", "binding"),
		info: desc("diagnosis_info", "One per open diagnosis: its kind, the binding limit and where it is set, the culprit where the limit is shared, "+
			"the first remedy and the one-line summary the alerts' annotations carry; 1.", "group", "cgroup", "kind", "binding", "binding_group", "culprit", "remedy", "summary"),
		cpu: desc("diagnosis_cpu_seconds_total", "CPU time the observer spent diagnosing, on the pipeline's thread (its clock read around each sample): part of process_cpu_seconds_total."),
	}
}

// Describe implements prometheus.Collector.
func (c *DiagnosisCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.shortfall
	ch <- c.info
	ch <- c.cpu
}

// Collect implements prometheus.Collector.
func (c *DiagnosisCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.CounterValue, c.src.CPUSeconds())
	for _, d := range c.src.Open() {
		binding, where := "none", ""
		if b := d.Binding; b != nil {
			binding, where = string(b.Kind), b.Group
		}
		culprit, remedy := "", ""
		if d.Culprit != nil {
			culprit = d.Culprit.Group
		}
		if len(d.Remedies) > 0 {
			remedy = string(d.Remedies[0].Action)
		}
		ch <- prometheus.MustNewConstMetric(c.shortfall, prometheus.GaugeValue, float64(d.Shortfall.Bytes), d.Group, d.Labels["cgroup"], string(d.Kind), binding)
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, d.Group, d.Labels["cgroup"], string(d.Kind), binding, where, culprit, remedy, d.Summary)
	}
}
