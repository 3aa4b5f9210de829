package metrics

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/thrashscope/thrashscope/internal/pipeline"
)

// runTick is a run's tick: 45 processes and 20 workloads.
func runTick() *pipeline.Tick {
	t := benchProcesses(45)
	w := benchTick(20)
	t.Workloads, t.Reading.Cgroups = w.Workloads, w.Reading.Cgroups
	return t
}

// text is families encoded as /metrics sends them, one line each, sorted.
func text(t *testing.T, g prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	slices.Sort(lines)
	return lines
}

// The package's own families, gathered without the registry, are what a
// pedantic registry gathers from the same collectors (every name, label
// and value checked, no series twice), beside a registry's own families.
func TestGathererAgreesWithThePedanticRegistry(t *testing.T) {
	src := fixedSource{runTick()}
	pedantic := prometheus.NewPedanticRegistry()
	pedantic.MustRegister(NewCollector(src), NewWorkloadCollector(src), NewSelfCollector("/proc"))
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewSelfCollector("/proc"))
	g := NewGatherer(reg, NewCollector(src), NewWorkloadCollector(src))

	want, got := text(t, pedantic), text(t, g)
	// The observer's own process_* series move between two gathers.
	own := func(l string) bool { return strings.HasPrefix(l, "process_") }
	want, got = slices.DeleteFunc(want, own), slices.DeleteFunc(got, own)
	if len(want) < 700 {
		t.Fatalf("%d lines from the pedantic registry, want a run's per-process and per-cgroup series (over 700)", len(want))
	}
	if !slices.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("%d lines against %d; first difference:\n got %s\nwant %s", len(got), len(want), got[i], want[i])
			}
		}
		t.Fatalf("%d lines against %d", len(got), len(want))
	}
	mfs, _ := g.Gather()
	if !slices.IsSortedFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) }) {
		t.Error("families not sorted by name")
	}
}

// A family both the registry and the package export is refused, named,
// and the rest gathered.
func TestGathererRefusesAFamilyTwice(t *testing.T) {
	src := fixedSource{runTick()}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "thrashscope_process_high_fault", Help: "Twice."}))
	mfs, err := NewGatherer(reg, NewCollector(src)).Gather()
	if err == nil || !strings.Contains(err.Error(), "thrashscope_process_high_fault is both the registry's and package metrics'") {
		t.Errorf("%v, want the family named", err)
	}
	if !slices.ContainsFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == "thrashscope_process_major_faults_total" }) {
		t.Error("the other families were not gathered")
	}
}

// A series that cannot be written (a label value the registry would refuse)
// is left out and named; a family left with none is not
// sent; the rest are.
func TestGathererLeavesOutABadSeries(t *testing.T) {
	d := desc("test_gauge", "A gauge.", "comm")
	bad := prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
		ch <- prometheus.NewInvalidMetric(d, errors.New("broken"))
		ch <- prometheus.NewInvalidMetric(d, errors.New("broken"))
	})
	mfs, err := NewGatherer(prometheus.NewRegistry(), bad, NewCollector(fixedSource{runTick()})).Gather()
	if err == nil || strings.Count(err.Error(), "broken") != 2 {
		t.Errorf("%v, want each bad series named", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "thrashscope_test_gauge" {
			t.Errorf("a family with no series written was sent: %v", mf)
		}
	}
	if len(mfs) < 10 {
		t.Errorf("%d families, want the collector's others", len(mfs))
	}
}

// BenchmarkGatherRun gathers and encodes a run's per-process and
// per-cgroup series as /metrics does, through the Gatherer; its baseline,
// BenchmarkGatherRunRegistry, through a registry.
func BenchmarkGatherRun(b *testing.B) {
	src := fixedSource{runTick()}
	benchScrape(b, NewGatherer(prometheus.NewRegistry(), NewCollector(src), NewWorkloadCollector(src)).Transactional())
}

func BenchmarkGatherRunRegistry(b *testing.B) {
	src := fixedSource{runTick()}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(src), NewWorkloadCollector(src))
	benchScrape(b, prometheus.ToTransactionalGatherer(reg))
}

// tickSource gives whichever tick it was last set to.
type tickSource struct{ t atomic.Pointer[pipeline.Tick] }

func (s *tickSource) Latest() (*pipeline.Tick, bool) { return s.t.Load(), true }

// encoded is families as text, one line each, in order.
func encoded(t *testing.T, mfs []*dto.MetricFamily) string {
	t.Helper()
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// A scrape through Transactional reuses the objects of one that is done,
// and none of it shows: each scrape is what a gather afresh gives for the
// same tick, with fewer series as with more. The families of a scrape not
// yet done stay as they were while another is gathered.
func TestTransactionalGatherKeepsNothingStale(t *testing.T) {
	src := &tickSource{}
	src.t.Store(runTick())
	g := NewGatherer(prometheus.NewRegistry(), NewCollector(src), NewWorkloadCollector(src), NewRunCollector(runStatus()))
	tg := g.Transactional()
	scrape := func() string {
		t.Helper()
		mfs, done, err := tg.Gather()
		defer done()
		if err != nil {
			t.Fatal(err)
		}
		return encoded(t, mfs)
	}
	fresh := func() string {
		t.Helper()
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		return encoded(t, mfs)
	}
	smaller := benchProcesses(5)
	w := benchTick(3)
	smaller.Workloads, smaller.Reading.Cgroups = w.Workloads, w.Reading.Cgroups
	smaller.Reading.Processes[0].MinorFaults = 123456789
	for i, tick := range []*pipeline.Tick{runTick(), smaller, runTick(), smaller} {
		src.t.Store(tick)
		if got, want := scrape(), fresh(); got != want {
			t.Fatalf("scrape %d, after %d done: %d bytes, a gather afresh %d; they differ", i+1, i, len(got), len(want))
		}
	}
	if s := scrape(); !strings.Contains(s, "1.23456789e+08") || strings.Count(s, "thrashscope_process_minor_faults_total{") != 5 {
		t.Fatalf("the smaller tick's scrape has not its values:\n%s", s)
	}

	mfs, done, err := tg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	held := encoded(t, mfs)
	src.t.Store(runTick())
	if scrape() == held {
		t.Fatal("the second tick's scrape is the first's")
	}
	if again := encoded(t, mfs); again != held {
		t.Fatal("a scrape not yet done changed while another was gathered")
	}
	done()
}

// send keeps a series' label pairs from one scrape to the next (the same
// pairs while its labels are the same, new ones once they change), makes a
// value valid UTF-8, and sends a series whose values do not match its
// descriptor's names as an invalid metric that says so.
func TestSendKeepsPairs(t *testing.T) {
	d := desc("test_send_info", "A test.", "run_id", "preset")
	series := newPairCache[seriesKey]()
	scrape := func(labels ...string) (*dto.Metric, error) {
		ch := make(chan prometheus.Metric, 1)
		newEmitter(ch, &series, nil).send(d, prometheus.GaugeValue, 1, labels...)
		series.sweep()
		var m dto.Metric
		return &m, (<-ch).Write(&m)
	}
	first, err := scrape("20261127-032907-a59613", "e4")
	if err != nil {
		t.Fatal(err)
	}
	l := first.GetLabel()
	if len(l) != 2 || l[0].GetName() != "preset" || l[0].GetValue() != "e4" || l[1].GetName() != "run_id" || l[1].GetValue() != "20261127-032907-a59613" {
		t.Fatalf("pairs %v, want preset and run_id, sorted", l)
	}
	again, _ := scrape("20261127-032907-a59613", "e4")
	if &again.Label[0] != &first.Label[0] {
		t.Error("the same series' pairs were built again")
	}
	other, _ := scrape("20261127-040000-bbbbbb", "e2\xff")
	if other.Label[0] == first.Label[0] || other.Label[0].GetValue() != "e2\uFFFD" {
		t.Errorf("a new run's pairs %v, want its own, the preset made valid UTF-8", other.Label)
	}
	if _, err := scrape("only-one"); err == nil || !strings.Contains(err.Error(), "inconsistent label cardinality") {
		t.Errorf("one value for two names: %v, want the cardinality named", err)
	}
}
