package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// arena holds the client_model objects of one scrape's own series: each
// series' Metric, its Counter, Gauge or Histogram and their values. Made
// afresh, they were three allocations a series, most of what a scrape
// allocated and so most of the daemon's garbage; once a scrape is encoded
// its arena is kept for the next (Gatherer.Transactional). Not safe for
// concurrent use: a scrape has an arena of its own.
type arena struct {
	families   slab[dto.MetricFamily]
	metrics    slab[dto.Metric]
	counters   slab[dto.Counter]
	gauges     slab[dto.Gauge]
	histograms slab[dto.Histogram]
	buckets    slab[dto.Bucket]
	floats     slab[float64]
	uints      slab[uint64]
	// samples are what the package's collectors send (written by the
	// collecting goroutine, read by the gathering one once received).
	samples slab[sample]

	// The gather's indexes: each family by name, and by descriptor (nil:
	// refused), and the families that are the package's.
	byName map[string]*dto.MetricFamily
	own    map[*prometheus.Desc]*dto.MetricFamily
	ours   map[*dto.MetricFamily]bool
}

func newArena() *arena {
	return &arena{byName: map[string]*dto.MetricFamily{}, own: map[*prometheus.Desc]*dto.MetricFamily{}, ours: map[*dto.MetricFamily]bool{}}
}

// reset hands every object out again. The caller of the last scrape's
// families must be done with them.
func (a *arena) reset() {
	a.families.n, a.metrics.n, a.counters.n, a.gauges.n = 0, 0, 0, 0
	a.histograms.n, a.buckets.n, a.floats.n, a.uints.n, a.samples.n = 0, 0, 0, 0, 0
	clear(a.byName)
	clear(a.own)
	clear(a.ours)
}

// family is an empty family named name, with help; the series slice of
// the family that last had the object is kept for its series.
func (a *arena) family(name, help *string) *dto.MetricFamily {
	mf := a.families.next()
	series := mf.Metric[:0]
	mf.Reset()
	mf.Name, mf.Help, mf.Metric = name, help, series
	return mf
}

// metric is an empty Metric.
func (a *arena) metric() *dto.Metric {
	m := a.metrics.next()
	m.Reset()
	return m
}

// write sets m to s's labels and value.
func (a *arena) write(m *dto.Metric, s *sample) {
	m.Label = s.pairs
	v := a.floats.next()
	*v = s.v
	if s.vt == prometheus.CounterValue {
		c := a.counters.next()
		c.Reset()
		c.Value, m.Counter = v, c
		return
	}
	g := a.gauges.next()
	g.Reset()
	g.Value, m.Gauge = v, g
}

// histogram is an empty Histogram with count and sum, its bucket slice
// kept from the object's last use. It, bucket, float and uint allocate
// each object afresh from a nil arena, for a series written on its own.
func (a *arena) histogram(count uint64, sum float64) *dto.Histogram {
	if a == nil {
		return &dto.Histogram{SampleCount: proto.Uint64(count), SampleSum: proto.Float64(sum)}
	}
	h := a.histograms.next()
	buckets := h.Bucket[:0]
	h.Reset()
	h.SampleCount, h.SampleSum, h.Bucket = a.uint(count), a.float(sum), buckets
	return h
}

// bucket is a histogram bucket.
func (a *arena) bucket(upper float64, cumulative uint64) *dto.Bucket {
	if a == nil {
		return &dto.Bucket{UpperBound: proto.Float64(upper), CumulativeCount: proto.Uint64(cumulative)}
	}
	b := a.buckets.next()
	b.Reset()
	b.UpperBound, b.CumulativeCount = a.float(upper), a.uint(cumulative)
	return b
}

func (a *arena) float(f float64) *float64 {
	p := a.floats.next()
	*p = f
	return p
}

func (a *arena) uint(u uint64) *uint64 {
	p := a.uints.next()
	*p = u
	return p
}

// slabChunk is how many objects a slab allocates at once.
const slabChunk = 128

// slab hands out objects of T from chunks it keeps: an object's address
// stays valid, and its contents are the last user's until set.
type slab[T any] struct {
	chunks [][]T
	n      int
}

func (s *slab[T]) next() *T {
	i, j := s.n/slabChunk, s.n%slabChunk
	if i == len(s.chunks) {
		s.chunks = append(s.chunks, make([]T, slabChunk))
	}
	s.n++
	return &s.chunks[i][j]
}

// arenas keeps the arenas of scrapes that are done, for the next: as many
// as scrapes ran at once, at most scrapesKept (a Prometheus, or an HA pair
// of them, scrapes one at a time; another scrape at once has an arena that
// goes with its garbage).
type arenas struct {
	mu   sync.Mutex
	free []*arena
}

// scrapesKept bounds the arenas kept: each holds a whole scrape's series
// (bench/README.md, Where the defaults come from).
const scrapesKept = 2

func (p *arenas) get() *arena {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		a := p.free[n-1]
		p.free = p.free[:n-1]
		return a
	}
	return newArena()
}

func (p *arenas) put(a *arena) {
	a.reset()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < scrapesKept {
		p.free = append(p.free, a)
	}
}
