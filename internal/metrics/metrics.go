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
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/thrashscope/thrashscope/internal/pipeline"
)

const namespace = "thrashscope"

// Source gives the latest tick.
type Source interface {
	Latest() (*pipeline.Tick, bool)
}

type updater interface {
	describe(ch chan<- *prometheus.Desc)
	update(t *pipeline.Tick, out *emitter)
}

// Collector is the thrashscope_* collector, but for the per-cgroup series
// (WorkloadCollector).
type Collector struct {
	src      Source
	updaters []updater

	mu     sync.Mutex // one scrape at a time uses the cache
	series pairCache[seriesKey]
}

// NewCollector builds every descriptor once.
func NewCollector(src Source) *Collector {
	return &Collector{src: src, updaters: []updater{newSystem(), newProcesses(), newProbes(), newDetector()}, series: newPairCache[seriesKey]()}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, u := range c.updaters {
		u.describe(ch)
	}
}

// Collect implements prometheus.Collector. Before the first sample it
// exports nothing rather than zeros that would read as real values.
func (c *Collector) Collect(ch chan<- prometheus.Metric) { c.collect(ch, nil) }

func (c *Collector) collect(ch chan<- prometheus.Metric, samples *slab[sample]) {
	t, ok := c.src.Latest()
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := newEmitter(ch, &c.series, samples)
	for _, u := range c.updaters {
		u.update(t, out)
	}
	c.series.sweep()
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	fq := prometheus.BuildFQName(namespace, "", name)
	d := prometheus.NewDesc(fq, help, labels, nil)
	families.Store(d, family{name: fq, help: help, labels: labels})
	return d
}

// emitter sends a collector's samples, the label pairs of each series
// kept in its collector's cache from one scrape to the next.
type emitter struct {
	ch     chan<- prometheus.Metric
	series *pairCache[seriesKey]
	// samples are the scrape's (its arena's, through the Gatherer); nil:
	// chunk, the samples sent, a chunk at a time.
	samples *slab[sample]
	chunk   []sample
}

// emitterChunk is how many samples an emitter allocates at once.
const emitterChunk = 128

// newEmitter sends to ch, series' pairs kept in series (nil: the caller's
// own pairs only), the samples from samples (nil: allocated).
func newEmitter(ch chan<- prometheus.Metric, series *pairCache[seriesKey], samples *slab[sample]) *emitter {
	return &emitter{ch: ch, series: series, samples: samples}
}

// sample sends one sample whose label pairs are built. A chunk is never
// used again: its samples may still wait in ch after the collector returns.
func (e *emitter) sample(d *prometheus.Desc, pairs []*dto.LabelPair, vt prometheus.ValueType, v float64) {
	if e.samples != nil {
		s := e.samples.next()
		*s = sample{d, pairs, vt, v}
		e.ch <- s
		return
	}
	if len(e.chunk) == cap(e.chunk) {
		e.chunk = make([]sample, 0, emitterChunk)
	}
	e.chunk = append(e.chunk, sample{d, pairs, vt, v})
	e.ch <- &e.chunk[len(e.chunk)-1]
}

// seriesKey is one series send exports: its descriptor and label values
// (at most two: no family send exports has more).
type seriesKey struct {
	d      *prometheus.Desc
	values [2]string
}

// send exports one sample. Label values are made valid UTF-8 first (a comm
// cut at 15 bytes inside a character, or one a process chose, is not), each
// bad byte becoming U+FFFD: Prometheus refuses anything else. A sample that
// still cannot be built (label values that do not match its descriptor's
// names) goes out as an invalid metric, which drops that one series and
// reaches the /metrics handler's error log and error counter, never the rest
// of the scrape.
func (e *emitter) send(d *prometheus.Desc, vt prometheus.ValueType, v float64, labels ...string) {
	f, ok := families.Load(d)
	if !ok || len(labels) != len(f.(family).labels) || len(labels) > len(seriesKey{}.values) {
		e.ch <- constMetric(d, vt, v, labels)
		return
	}
	e.sample(d, e.pairsOf(d, f.(family), labels), vt, v)
}

// pairs are the label pairs of d's series with labels, as many as d has
// names and at most two.
func (e *emitter) pairs(d *prometheus.Desc, labels ...string) []*dto.LabelPair {
	f, _ := families.Load(d)
	return e.pairsOf(d, f.(family), labels)
}

func (e *emitter) pairsOf(d *prometheus.Desc, f family, labels []string) []*dto.LabelPair {
	k := seriesKey{d: d}
	copy(k.values[:], labels)
	return e.series.get(k, func() []*dto.LabelPair {
		p := make([]*dto.LabelPair, len(labels))
		for i, name := range f.labels {
			p[i] = pair(name, labels[i])
		}
		return p
	})
}

// constMetric is a sample client_golang builds and checks, or the invalid
// metric that says why it could not.
func constMetric(d *prometheus.Desc, vt prometheus.ValueType, v float64, labels []string) prometheus.Metric {
	for i, l := range labels {
		if !utf8.ValidString(l) {
			labels = slices.Clone(labels) // the caller's slice stays as it was
			labels[i] = Label(l)
		}
	}
	m, err := prometheus.NewConstMetric(d, vt, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

// Label returns s as a valid label value: invalid UTF-8 becomes U+FFFD.
func Label(s string) string {
	return strings.ToValidUTF8(s, "\uFFFD")
}
