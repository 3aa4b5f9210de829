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
// the detector's and the workloads'), the latter gathered straight into
// client_model's types. They are most of a scrape (through an e4 run,
// 1,000 of its 1,400 series), and the registry's work for each series (a
// check of its names and values, a hash of its labels against duplicates,
// the sort of every family's series) was a fifth of a scrape's CPU. Their
// names and labels are this package's own, built once (desc, the pair
// caches) and held to the registry's checks by the tests
// (TestGathererAgreesWithThePedanticRegistry); a series that cannot be
// written is left out and named in the error, as the registry does.
// Series go out in the order collected, which is the tick's.
type Gatherer struct {
	registry prometheus.Gatherer
	direct   []prometheus.Collector
}

// NewGatherer serves registry's families with direct's.
func NewGatherer(registry prometheus.Gatherer, direct ...prometheus.Collector) *Gatherer {
	return &Gatherer{registry: registry, direct: direct}
}

// families holds each descriptor's family name and help, as desc made it:
// a prometheus.Desc does not say them.
var families sync.Map // *prometheus.Desc → family

type family struct{ name, help string }

// Gather implements prometheus.Gatherer.
func (g *Gatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := g.registry.Gather()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	ch := make(chan prometheus.Metric, 256)
	go func() {
		defer close(ch)
		for _, c := range g.direct {
			c.Collect(ch)
		}
	}()
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	own := map[*prometheus.Desc]*dto.MetricFamily{} // nil: refused, said once
	ours := map[*dto.MetricFamily]bool{}
	for m := range ch {
		d := m.Desc()
		mf, ok := own[d]
		if ok && mf == nil {
			continue
		}
		if !ok {
			v, known := families.Load(d)
			if !known {
				errs = append(errs, fmt.Errorf("series of %s: not a descriptor of package metrics", d))
				own[d] = nil
				continue
			}
			f := v.(family)
			if mf, ok = byName[f.name]; ok && !ours[mf] {
				errs = append(errs, fmt.Errorf("family %s is both the registry's and package metrics'", f.name))
				own[d] = nil
				continue
			}
			if mf == nil {
				mf = &dto.MetricFamily{Name: &f.name, Help: &f.help}
				byName[f.name] = mf
				ours[mf] = true
				mfs = append(mfs, mf)
			}
			own[d] = mf
		}
		dm := &dto.Metric{}
		if err := m.Write(dm); err != nil {
			errs = append(errs, fmt.Errorf("a series of %s: %w", mf.GetName(), err))
			continue
		}
		t := typeOf(dm)
		switch {
		case mf.Type == nil:
			mf.Type = t.Enum()
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
