// Package metrics exports thrashscope's readings to Prometheus. Every
// collector works from the pipeline's latest Tick, so a scrape costs no
// extra reads of the kernel and all series of one scrape agree in time.
//
// One file per source: system.go (procfs), process.go (per process),
// probe.go (the BPF probes themselves), detector.go (the indicators),
// workload.go (per cgroup, a collector of its own).
package metrics

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/pipeline"
)

const namespace = "thrashscope"

// Source gives the latest tick.
type Source interface {
	Latest() (*pipeline.Tick, bool)
}

type updater interface {
	describe(ch chan<- *prometheus.Desc)
	update(t *pipeline.Tick, ch chan<- prometheus.Metric)
}

// Collector is the thrashscope_* collector, but for the per-cgroup series
// (WorkloadCollector).
type Collector struct {
	src      Source
	updaters []updater
}

// NewCollector builds every descriptor once.
func NewCollector(src Source) *Collector {
	return &Collector{src: src, updaters: []updater{newSystem(), newProcesses(), newProbes(), newDetector()}}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, u := range c.updaters {
		u.describe(ch)
	}
}

// Collect implements prometheus.Collector. Before the first sample it
// exports nothing rather than zeros that would read as real values.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	t, ok := c.src.Latest()
	if !ok {
		return
	}
	for _, u := range c.updaters {
		u.update(t, ch)
	}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	fq := prometheus.BuildFQName(namespace, "", name)
	d := prometheus.NewDesc(fq, help, labels, nil)
	families.Store(d, family{name: fq, help: help})
	return d
}

// send exports one sample. Label values are made valid UTF-8 first (a comm
// cut at 15 bytes inside a character, or one a process chose, is not), each
// bad byte becoming U+FFFD: Prometheus refuses anything else. A sample that
// still cannot be built goes out as an invalid metric, which drops that one
// series and reaches the /metrics handler's error log and error counter,
// never the rest of the scrape.
func send(ch chan<- prometheus.Metric, d *prometheus.Desc, vt prometheus.ValueType, v float64, labels ...string) {
	for i, l := range labels {
		if !utf8.ValidString(l) {
			labels = slices.Clone(labels) // the caller's slice stays as it was
			labels[i] = Label(l)
		}
	}
	m, err := prometheus.NewConstMetric(d, vt, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

// Label returns s as a valid label value: invalid UTF-8 becomes U+FFFD.
func Label(s string) string {
	return strings.ToValidUTF8(s, "\uFFFD")
}
