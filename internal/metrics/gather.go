package metrics

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Gatherer is what /metrics serves: a registry's families and those of
// this package's own collectors (the host's, the processes', the probes',
// the detector's, the workloads' and the run's), the latter gathered
// straight into client_model's types. They are most of a scrape, and the
// registry's work for each series (a check of its names and values, a hash
// of its labels against duplicates, the sort of every family's series)
// was a large share of a scrape's CPU (bench/README.md, Where the defaults
// come from). Their names and labels are this package's own, built once
// (desc, the pair caches) and held to the registry's checks by the tests
// (TestGathererAgreesWithThePedanticRegistry); a series that cannot be
// written is left out and named in the error, as the registry does.
// Series go out in the order collected, which is the tick's.
//
// Served through Transactional, a scrape's own objects (its families,
// series and values) are kept for the next scrape once it is encoded.
type Gatherer struct {
	registry prometheus.Gatherer
	direct   []prometheus.Collector
	arenas   arenas
}

// NewGatherer serves registry's families with direct's.
func NewGatherer(registry prometheus.Gatherer, direct ...prometheus.Collector) *Gatherer {
	return &Gatherer{registry: registry, direct: direct}
}

// families holds each descriptor's family name, help and label names, as
// desc made it: a prometheus.Desc does not say them.
var families sync.Map // *prometheus.Desc → family

type family struct {
	name, help string
	labels     []string // the variable labels' names
}

// Gather implements prometheus.Gatherer. The families are the caller's to
// keep.
func (g *Gatherer) Gather() ([]*dto.MetricFamily, error) {
	return g.gather(newArena())
}

// Transactional is g as promhttp's transactional gatherer: the objects of
// a scrape's own series are kept, once it calls done, for a later scrape.
func (g *Gatherer) Transactional() prometheus.TransactionalGatherer {
	return transactional{g}
}

type transactional struct{ g *Gatherer }

func (t transactional) Gather() ([]*dto.MetricFamily, func(), error) {
	a := t.g.arenas.get()
	mfs, err := t.g.gather(a)
	return mfs, func() { t.g.arenas.put(a) }, err
}

func (g *Gatherer) gather(a *arena) ([]*dto.MetricFamily, error) {
	mfs, err := g.registry.Gather()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	ch := make(chan prometheus.Metric, 256)
	go func() {
		defer close(ch)
		for _, c := range g.direct {
			if ac, ok := c.(arenaCollector); ok {
				ac.collect(ch, &a.samples)
			} else {
				c.Collect(ch)
			}
		}
	}()
	for _, mf := range mfs {
		a.byName[mf.GetName()] = mf
	}
	for m := range ch {
		mf, made, err := a.familyOf(m.Desc())
		if err != nil {
			errs = append(errs, err)
		}
		if mf == nil {
			continue
		}
		if made {
			mfs = append(mfs, mf)
		}
		dm := a.metric()
		if err := a.writeSeries(dm, m); err != nil {
			errs = append(errs, fmt.Errorf("a series of %s: %w", mf.GetName(), err))
			continue
		}
		t := typeOf(dm)
		switch {
		case mf.Type == nil:
			mf.Type = &metricTypes[t]
		case mf.GetType() != t:
			errs = append(errs, fmt.Errorf("a series of %s is a %s, the family a %s", mf.GetName(), t, mf.GetType()))
			continue
		}
		mf.Metric = append(mf.Metric, dm)
	}
	// A family none of whose series could be written is not sent.
	mfs = slices.DeleteFunc(mfs, func(mf *dto.MetricFamily) bool { return len(mf.Metric) == 0 })
	slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return mfs, errors.Join(errs...)
}

// familyOf is the family a series of d goes in, made (made true) on its
// first series; nil for a descriptor it refuses, with the error the first
// time.
func (a *arena) familyOf(d *prometheus.Desc) (mf *dto.MetricFamily, made bool, err error) {
	if mf, ok := a.own[d]; ok {
		return mf, false, nil
	}
	v, known := families.Load(d)
	if !known {
		a.own[d] = nil
		return nil, false, fmt.Errorf("series of %s: not a descriptor of package metrics", d)
	}
	f := v.(family)
	mf, ok := a.byName[f.name]
	if ok && !a.ours[mf] {
		a.own[d] = nil
		return nil, false, fmt.Errorf("family %s is both the registry's and package metrics'", f.name)
	}
	if mf == nil {
		mf = a.family(&f.name, &f.help)
		a.byName[f.name] = mf
		a.ours[mf] = true
		made = true
	}
	a.own[d] = mf
	return mf, made, nil
}

// arenaCollector is a collector of the package that can take the samples
// it sends from a scrape's arena. It writes them, and the Gatherer only
// reads them as it takes each from ch.
type arenaCollector interface {
	collect(ch chan<- prometheus.Metric, samples *slab[sample])
}

// writeSeries writes m into dm, the package's own kinds of series from the
// arena.
func (a *arena) writeSeries(dm *dto.Metric, m prometheus.Metric) error {
	switch s := m.(type) {
	case *sample:
		a.write(dm, s)
	case sample:
		a.write(dm, &s)
	case latencySample:
		s.writeTo(dm, a)
	default:
		return m.Write(dm)
	}
	return nil
}

// metricTypes are every type, for a family to point at: the encoders only
// read it.
var metricTypes = func() (t [dto.MetricType_GAUGE_HISTOGRAM + 1]dto.MetricType) {
	for i := range t {
		t[i] = dto.MetricType(i)
	}
	return t
}()

// typeOf is the type a written series says it is.
func typeOf(m *dto.Metric) dto.MetricType {
	switch {
	case m.Counter != nil:
		return dto.MetricType_COUNTER
	case m.Gauge != nil:
		return dto.MetricType_GAUGE
	case m.Histogram != nil:
		return dto.MetricType_HISTOGRAM
	case m.Summary != nil:
		return dto.MetricType_SUMMARY
	}
	return dto.MetricType_UNTYPED
}
