package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

type system struct {
	cpu, swapIn, swapOut, pagedIn, pagedOut, faults, majors *prometheus.Desc
	refaults, activations, restores                         *prometheus.Desc
	stalled, memTotal, memAvail, swapTotal, swapFree        *prometheus.Desc
	oomKills                                                *prometheus.Desc
	sourceOK, sourceFailures                                *prometheus.Desc
}

func newSystem() *system {
	return &system{
		cpu:            desc("cpu_seconds_total", "CPU time of all CPUs by mode, from /proc/stat (the paper's CPU figures).", "mode"),
		swapIn:         desc("swap_in_pages_total", "Pages swapped in (vmstat pswpin)."),
		swapOut:        desc("swap_out_pages_total", "Pages swapped out (vmstat pswpout)."),
		pagedIn:        desc("paged_in_bytes_total", "Bytes of block I/O read in (vmstat pgpgin, KiB x 1024)."),
		pagedOut:       desc("paged_out_bytes_total", "Bytes of block I/O written out (vmstat pgpgout, KiB x 1024)."),
		faults:         desc("page_faults_total", "Page faults of all kinds (vmstat pgfault)."),
		majors:         desc("major_faults_total", "Major page faults (vmstat pgmajfault)."),
		refaults:       desc("workingset_refaults_total", "Evicted pages faulted back in while still in the working set (vmstat workingset_refault_*).", "type"),
		activations:    desc("workingset_activations_total", "Refaulted pages activated at once (vmstat workingset_activate_*).", "type"),
		restores:       desc("workingset_restores_total", "Refaulted pages that had been part of the workingset when evicted (vmstat workingset_restore_*).", "type"),
		stalled:        desc("pressure_memory_stalled_seconds_total", "Time some or all non-idle tasks were stalled on memory (PSI /proc/pressure/memory).", "kind"),
		memTotal:       desc("memory_total_bytes", "Usable RAM (MemTotal)."),
		memAvail:       desc("memory_available_bytes", "Memory available to new work without swapping (MemAvailable)."),
		swapTotal:      desc("swap_total_bytes", "Swap space configured (SwapTotal)."),
		swapFree:       desc("swap_free_bytes", "Swap space unused (SwapFree)."),
		oomKills:       desc("oom_kills_total", "Processes killed by the OOM killer (vmstat oom_kill)."),
		sourceOK:       desc("source_success", "1 when the latest reading read this kernel source, 0 when it failed (its series are then left out of the scrape, not sent as 0).", "source"),
		sourceFailures: desc("source_failures_total", "Readings in which this kernel source could not be read.", "source"),
	}
}

func (m *system) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.cpu, m.swapIn, m.swapOut, m.pagedIn, m.pagedOut, m.faults, m.majors,
		m.refaults, m.activations, m.restores, m.stalled, m.memTotal, m.memAvail, m.swapTotal, m.swapFree, m.oomKills,
		m.sourceOK, m.sourceFailures} {
		ch <- d
	}
}

func (m *system) update(t *pipeline.Tick, out *emitter) {
	s := t.Reading
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		out.send(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		out.send(d, prometheus.GaugeValue, v)
	}
	// A source that failed this reading sends nothing: its counters read
	// as 0 would be a reset to Prometheus.
	if s.OK(sampler.SourceStat) {
		c := s.CPU
		for mode, v := range map[string]float64{"user": c.User, "nice": c.Nice, "system": c.System, "idle": c.Idle,
			"iowait": c.IOWait, "irq": c.IRQ, "softirq": c.SoftIRQ, "steal": c.Steal} {
			counter(m.cpu, v, mode)
		}
	}
	if s.OK(sampler.SourceVMStat) {
		m.vmstat(s.VMStat, counter)
	}
	if p := s.Pressure; p != nil && s.OK(sampler.SourcePressure) {
		counter(m.stalled, p.SomeTotal.Seconds(), "some")
		counter(m.stalled, p.FullTotal.Seconds(), "full")
	}
	if s.OK(sampler.SourceMeminfo) {
		gauge(m.memTotal, float64(s.Memory.TotalBytes))
		gauge(m.memAvail, float64(s.Memory.AvailableBytes))
		gauge(m.swapTotal, float64(s.Memory.SwapTotalBytes))
		gauge(m.swapFree, float64(s.Memory.SwapFreeBytes))
	}
	for src := range sampler.NumSources {
		if !s.Used[src] {
			continue
		}
		ok := 0.0
		if s.Failed[src] == nil {
			ok = 1
		}
		out.send(m.sourceOK, prometheus.GaugeValue, ok, src.String())
		counter(m.sourceFailures, float64(s.Failures[src]), src.String())
	}
}

func (m *system) vmstat(v procfs.VMStat, counter func(d *prometheus.Desc, v float64, labels ...string)) {
	counter(m.swapIn, float64(v.PswpIn))
	counter(m.swapOut, float64(v.PswpOut))
	counter(m.pagedIn, float64(v.PgpgIn)*1024)
	counter(m.pagedOut, float64(v.PgpgOut)*1024)
	counter(m.faults, float64(v.PgFault))
	counter(m.majors, float64(v.PgMajFault))
	counter(m.refaults, float64(v.WorkingsetRefaultAnon), "anon")
	counter(m.refaults, float64(v.WorkingsetRefaultFile), "file")
	counter(m.activations, float64(v.WorkingsetActivateAnon), "anon")
	counter(m.activations, float64(v.WorkingsetActivateFile), "file")
	counter(m.restores, float64(v.WorkingsetRestoreAnon), "anon")
	counter(m.restores, float64(v.WorkingsetRestoreFile), "file")
	counter(m.oomKills, float64(v.OOMKill))
}
