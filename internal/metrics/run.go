package metrics

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/run"
)

// RunSource is the run side's state, which the run metrics read.
type RunSource interface {
	Status() run.Status
}

// RunCollector exports the run_* metrics for the most recent run: gauges
// that follow it live, and counters across runs.
type RunCollector struct {
	src RunSource

	info, active, planned, demand, limit, cycles, lateness, outcomes, writeErrors, swapDevice, durations *prometheus.Desc

	policy, decisions, frozen, protected *prometheus.Desc
	// gauges are every registered policy's own figures, by name
	// (policy.AllGauges), published whatever the run's policy.
	gauges []policyGauge

	mu     sync.Mutex // one scrape at a time uses the cache
	series pairCache[seriesKey]
}

// NewRunCollector builds the run metrics over the run side's state.
func NewRunCollector(src RunSource) *RunCollector {
	d := desc
	return &RunCollector{
		src:    src,
		series: newPairCache[seriesKey](),
		durations: d("run_write_cycle_duration_seconds",
			"How long consumers' write cycles took (W writes, without the sleep); slow cycles are thrashing."),
		info:     d("run_info", "The most recent run, active or ended; 1.", "run_id", "preset"),
		active:   d("run_consumers_active", "Consumers of the most recent run that hold their memory now."),
		planned:  d("run_consumers_planned", "Consumers the schedule has active now."),
		demand:   d("run_demand_bytes", "Memory the active consumers ask for: active × size."),
		limit:    d("run_memory_limit_bytes", "The run cgroup's memory limit."),
		cycles:   d("run_write_cycles_total", "Write cycles each consumer of the most recent run has finished.", "consumer"),
		lateness: d("run_consumer_lateness_seconds", "How long past its planned finish t_f each consumer ended (or, still running, is now).", "consumer"),
		outcomes: d("runs_total", "Runs that ended, by outcome.", "outcome"),
		swapDevice: d("run_swap_device_info", "The emulated swap device of the most recent run (profile none: the host's swap as it is) and what the kernel's I/O throttle held on this host: "+
			"reads and writes (cgroup v2 io.max), reads (cgroup v1 blkio: swap-ins only), or none; 1.", "profile", "throttled"),
		policy:    d("run_policy_info", "The thrash-control policy of the most recent run; 1.", "policy"),
		decisions: d("run_policy_decisions_total", "Actions the most recent run's policy took on its consumers, by kind (protect, release, freeze, thaw).", "kind"),
		frozen:    d("run_consumers_frozen", "Consumers the run's policy holds frozen now."),
		protected: d("run_consumers_protected", "Consumers the run's policy protects now (their region locked)."),
		gauges:    policyGauges(),
		writeErrors: d("run_record_write_errors_total", "Writes of run records and tables to --data.dir that failed (a full disk, a read-only file system); "+
			"a run that cannot write its first record is refused with 507. The observer's log has each cause."),
	}
}

// Describe implements prometheus.Collector.
func (c *RunCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.durations, c.info, c.active, c.planned, c.demand, c.limit, c.cycles, c.lateness, c.outcomes, c.writeErrors, c.swapDevice,
		c.policy, c.decisions, c.frozen, c.protected} {
		ch <- d
	}
	for _, g := range c.gauges {
		ch <- g.desc
	}
}

// Collect implements prometheus.Collector.
func (c *RunCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch, nil) }

func (c *RunCollector) collect(ch chan<- prometheus.Metric, samples *slab[sample]) {
	st := c.src.Status()
	ch <- prometheus.MustNewConstHistogram(c.durations, st.Cycles.Count, st.Cycles.Sum, st.Cycles.Cumulative())
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.series.sweep()
	out := newEmitter(ch, &c.series, samples)
	for _, o := range run.OutcomeNames {
		out.send(c.outcomes, prometheus.CounterValue, float64(st.Outcomes[o]), o)
	}
	out.send(c.writeErrors, prometheus.CounterValue, float64(st.WriteErrors))
	if !st.Last {
		return
	}
	p := st.Progress
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		out.send(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.info, 1, st.ID, st.Preset)
	throttled := "none"
	if len(st.SwapThrottled) > 0 {
		throttled = strings.Join(st.SwapThrottled, " and ")
	}
	gauge(c.swapDevice, 1, st.SwapDevice.Profile, throttled)
	if !st.Active {
		p.Active, p.Planned, p.DemandBytes = 0, 0, 0
	}
	gauge(c.active, float64(p.Active))
	gauge(c.planned, float64(p.Planned))
	gauge(c.demand, float64(p.DemandBytes))
	gauge(c.limit, float64(p.LimitBytes))
	pol := st.Policy
	if pol.Policy != "" {
		gauge(c.policy, 1, pol.Policy)
	}
	for _, k := range []string{"protect", "release", "freeze", "thaw"} {
		out.send(c.decisions, prometheus.CounterValue, float64(pol.Decisions[k]), k)
	}
	if !st.Active {
		pol.Frozen, pol.Protected, pol.Gauges = 0, 0, nil
	}
	gauge(c.frozen, float64(pol.Frozen))
	gauge(c.protected, float64(pol.Protected))
	for _, g := range c.gauges {
		gauge(g.desc, pol.Gauges[g.name]) // 0 under a policy without it
	}
	for i, n := range p.Cycles {
		name := run.ConsumerName(i)
		out.send(c.cycles, prometheus.CounterValue, float64(n), name)
		gauge(c.lateness, p.LatenessSeconds[i], name)
	}
}

// policyGauge is one of a policy's own figures and its series.
type policyGauge struct {
	name string
	desc *prometheus.Desc
}

// policyGauges describes each registered policy's gauges as
// run_policy_<name>.
func policyGauges() []policyGauge {
	var out []policyGauge
	for _, g := range policy.AllGauges() {
		out = append(out, policyGauge{name: g.Name, desc: desc("run_policy_"+g.Name, g.Help)})
	}
	return out
}
