// Package metrics exports thrashscope's readings to Prometheus. Every
// collector works from the sampler's latest Sample, so a scrape costs no
// extra reads of the kernel and all series of one scrape agree in time.
//
// One file per source: system.go (procfs), process.go (per process),
// probe.go (the BPF probes themselves), detector.go (the indicators).
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/sampler"
)

const namespace = "thrashscope"

// Source gives the latest sample.
type Source interface {
	Latest() (*sampler.Sample, bool)
}

type updater interface {
	describe(ch chan<- *prometheus.Desc)
	update(s *sampler.Sample, ch chan<- prometheus.Metric)
}

// Collector is the thrashscope_* collector.
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
	s, ok := c.src.Latest()
	if !ok {
		return
	}
	for _, u := range c.updaters {
		u.update(s, ch)
	}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}
