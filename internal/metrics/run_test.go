package metrics

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/thrashscope/thrashscope/internal/run"
)

type fakeRuns struct{ st run.Status }

func (f fakeRuns) Status() run.Status { return f.st }

func TestRunMetrics(t *testing.T) {
	src := &fakeRuns{st: run.Status{Outcomes: map[string]uint64{run.StateCompleted: 2}, WriteErrors: 3}}
	c := NewRunCollector(src)
	// Before any run: only the outcome counters, each from 0, and the
	// failed writes (a run refused for a full disk is never a run).
	want := `
# HELP thrashscope_runs_total Runs that ended, by outcome.
# TYPE thrashscope_runs_total counter
thrashscope_runs_total{outcome="aborted"} 0
thrashscope_runs_total{outcome="completed"} 2
thrashscope_runs_total{outcome="failed"} 0
# HELP thrashscope_run_record_write_errors_total Writes of run records and tables to --data.dir that failed (a full disk, a read-only file system); a run that cannot write its first record is refused with 507. The observer's log has each cause.
# TYPE thrashscope_run_record_write_errors_total counter
thrashscope_run_record_write_errors_total 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "thrashscope_runs_total", "thrashscope_run_info", "thrashscope_run_record_write_errors_total"); err != nil {
		t.Error(err)
	}

	src.st = run.Status{Last: true, ID: "20261122-101500-abcdef", Preset: "e4", Active: true, Outcomes: src.st.Outcomes,
		Progress: run.Progress{Active: 3, Planned: 4, DemandBytes: 30 << 20, LimitBytes: 100 << 20,
			Cycles: []uint64{10, 7}, LatenessSeconds: []float64{0, 1.5}}}
	src.st.Cycles.Observe(3 * time.Millisecond)
	src.st.Cycles.Observe(2 * time.Second)
	want = `
# HELP thrashscope_run_info The most recent run, active or ended; 1.
# TYPE thrashscope_run_info gauge
thrashscope_run_info{preset="e4",run_id="20261122-101500-abcdef"} 1
# HELP thrashscope_run_consumers_active Consumers of the most recent run that hold their memory now.
# TYPE thrashscope_run_consumers_active gauge
thrashscope_run_consumers_active 3
# HELP thrashscope_run_consumers_planned Consumers the schedule has active now.
# TYPE thrashscope_run_consumers_planned gauge
thrashscope_run_consumers_planned 4
# HELP thrashscope_run_demand_bytes Memory the active consumers ask for: active × size.
# TYPE thrashscope_run_demand_bytes gauge
thrashscope_run_demand_bytes 3.145728e+07
# HELP thrashscope_run_write_cycles_total Write cycles each consumer of the most recent run has finished.
# TYPE thrashscope_run_write_cycles_total counter
thrashscope_run_write_cycles_total{consumer="consumer-00"} 10
thrashscope_run_write_cycles_total{consumer="consumer-01"} 7
# HELP thrashscope_run_consumer_lateness_seconds How long past its planned finish t_f each consumer ended (or, still running, is now).
# TYPE thrashscope_run_consumer_lateness_seconds gauge
thrashscope_run_consumer_lateness_seconds{consumer="consumer-00"} 0
thrashscope_run_consumer_lateness_seconds{consumer="consumer-01"} 1.5
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "thrashscope_run_info", "thrashscope_run_consumers_active",
		"thrashscope_run_consumers_planned", "thrashscope_run_demand_bytes", "thrashscope_run_write_cycles_total",
		"thrashscope_run_consumer_lateness_seconds"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "thrashscope_run_write_cycle_duration_seconds"); n != 1 {
		t.Errorf("duration histogram: %d series", n)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "thrashscope_run_write_cycle_duration_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		var at4ms, at2s uint64
		for _, b := range h.GetBucket() {
			switch b.GetUpperBound() {
			case 0.004:
				at4ms = b.GetCumulativeCount()
			case 2.048:
				at2s = b.GetCumulativeCount()
			}
		}
		if h.GetSampleCount() != 2 || math.Abs(h.GetSampleSum()-2.003) > 1e-9 || at4ms != 1 || at2s != 2 {
			t.Errorf("duration histogram: count %d, sum %g, %d at or below 4 ms, %d at or below 2.048 s; want 2, 2.003, 1, 2", h.GetSampleCount(), h.GetSampleSum(), at4ms, at2s)
		}
	}
	src.st.Policy = run.PolicyState{Policy: "binpack", Decisions: map[string]uint64{"freeze": 12, "thaw": 9}, Frozen: 3, Gauges: map[string]float64{"bin": 2, "bins": 3}}
	policyWant := `
# HELP thrashscope_run_policy_info The thrash-control policy of the most recent run; 1.
# TYPE thrashscope_run_policy_info gauge
thrashscope_run_policy_info{policy="binpack"} 1
# HELP thrashscope_run_policy_decisions_total Actions the most recent run's policy took on its consumers, by kind (protect, release, freeze, thaw).
# TYPE thrashscope_run_policy_decisions_total counter
thrashscope_run_policy_decisions_total{kind="freeze"} 12
thrashscope_run_policy_decisions_total{kind="protect"} 0
thrashscope_run_policy_decisions_total{kind="release"} 0
thrashscope_run_policy_decisions_total{kind="thaw"} 9
# HELP thrashscope_run_consumers_frozen Consumers the run's policy holds frozen now.
# TYPE thrashscope_run_consumers_frozen gauge
thrashscope_run_consumers_frozen %d
# HELP thrashscope_run_policy_bin binpack: the bin running now, from 1; 0 while every consumer fits and none is held.
# TYPE thrashscope_run_policy_bin gauge
thrashscope_run_policy_bin %d
`
	policyNames := []string{"thrashscope_run_policy_info", "thrashscope_run_policy_decisions_total", "thrashscope_run_consumers_frozen", "thrashscope_run_policy_bin"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(fmt.Sprintf(policyWant, 3, 2)), policyNames...); err != nil {
		t.Error(err)
	}
	// An ended run keeps its info and per-consumer series, with nothing active.
	src.st.Active = false
	if err := testutil.CollectAndCompare(c, strings.NewReader(fmt.Sprintf(policyWant, 0, 0)), policyNames...); err != nil {
		t.Errorf("an ended run: %v", err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP thrashscope_run_consumers_active Consumers of the most recent run that hold their memory now.
# TYPE thrashscope_run_consumers_active gauge
thrashscope_run_consumers_active 0
`), "thrashscope_run_consumers_active"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
