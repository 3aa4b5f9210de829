package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/thrashscope/thrashscope/internal/labelvalue"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

// processes exports the tracked processes only (top-K plus the active run's
// consumers): the sampler bounds the set, and a process that exits is
// simply absent from the next sample, so its series go away. Each series'
// label pairs are kept from one scrape to the next, as the workloads' are:
// through a run, the consumers' series are most of a scrape.
type processes struct {
	major, minor, stall, stallOff, cpu, rss, swap, virt, wss, demand, high *prometheus.Desc

	mu    sync.Mutex // one scrape at a time uses the cache
	pairs pairCache[processKey]
}

// processKey is one per-process series shape: the process and the extra
// label (kind, mode) a family adds, if any.
type processKey struct {
	pid         int
	comm        string
	name, value string
}

func newProcesses() *processes {
	return &processes{
		pairs:    newPairCache[processKey](),
		major:    desc("process_major_faults_total", "Major page faults by kind, from the BPF probe since it first saw the process: anon (private anonymous memory read back from swap), shmem (shared anonymous memory or tmpfs read back from swap), file (a page-cache miss on a real file); unknown when the kind could not be told (or on procfs alone).", "pid", "comm", "kind"),
		minor:    desc("process_minor_faults_total", "Minor page faults (minflt in /proc/<pid>/stat).", "pid", "comm"),
		stall:    desc("process_memory_stall_seconds_total", "Time the process's threads spent in a memory stall as PSI counts it (in_memstall set: reclaim, refault reads, throttling), on CPU and off, summed over threads, from the BPF probe. Off CPU and reclaim are timed exactly; the rest on CPU is sampled every 1 ms.", "pid", "comm"),
		stallOff: desc("process_memory_stall_off_cpu_seconds_total", "The part of process_memory_stall_seconds_total spent off CPU: waiting for a refault read, throttled, or runnable but preempted. The rest was on CPU, mostly reclaiming.", "pid", "comm"),
		cpu:      desc("process_cpu_seconds_total", "CPU time of the process by mode (utime, stime).", "pid", "comm", "mode"),
		rss:      desc("process_resident_bytes", "Resident set size.", "pid", "comm"),
		swap:     desc("process_swap_bytes", "Memory swapped out (VmSwap).", "pid", "comm"),
		virt:     desc("process_virtual_bytes", "Virtual memory size.", "pid", "comm"),
		wss:      desc("process_working_set_bytes", "Working set over the last --wss.interval in wall-clock time: pages referenced since the kernel's accessed bits were cleared (clear_refs, smaps Referenced).", "pid", "comm"),
		demand:   desc("process_working_set_demand_bytes", "Working set in the process's own time (Denning's): what it would reference in --wss.interval if it were not stalled on memory, process_working_set_bytes with shared pages split among their processes as Pss splits them, plus the pages faulted back from swap in the window, scaled by the window's unstalled share and capped at the proportional resident plus swapped memory (Pss + SwapPss). Equal to the working set on procfs alone.", "pid", "comm"),
		high:     desc("process_high_fault", "1 while the process is in the detector's high-fault set.", "pid", "comm"),
	}
}

func (m *processes) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.major, m.minor, m.stall, m.stallOff, m.cpu, m.rss, m.swap, m.virt, m.wss, m.demand, m.high} {
		ch <- d
	}
}

// labelPairs are a process's series' pairs: comm, the extra label, pid. A
// comm is any 15 bytes a process chose: escaped as the workloads' names
// are, so that no control byte reaches a terminal that curls /metrics.
func (m *processes) labelPairs(pid int, comm, name, value string) []*dto.LabelPair {
	return m.pairs.get(processKey{pid, comm, name, value}, func() []*dto.LabelPair {
		p := []*dto.LabelPair{pair("pid", strconv.Itoa(pid)), pair("comm", labelvalue.Escape(comm))}
		if name != "" {
			p = append(p, pair(name, value))
		}
		return nonEmpty(p)
	})
}

func (m *processes) update(t *pipeline.Tick, out *emitter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.pairs.sweep()
	s := t.Reading
	for _, p := range s.Processes {
		base := m.labelPairs(p.PID, p.Comm, "", "")
		send := func(d *prometheus.Desc, vt prometheus.ValueType, v float64) {
			out.sample(d, base, vt, v)
		}
		for i, kind := range readout.Kinds {
			if skipKind(kind, p.MajorFaults[i], len(s.Probes) > 0) {
				continue
			}
			out.sample(m.major, m.labelPairs(p.PID, p.Comm, "kind", kind), prometheus.CounterValue, float64(p.MajorFaults[i]))
		}
		send(m.minor, prometheus.CounterValue, float64(p.MinorFaults))
		if p.HasStall {
			send(m.stall, prometheus.CounterValue, p.Stall.Total().Seconds())
			send(m.stallOff, prometheus.CounterValue, p.Stall.OffCPU.Seconds())
		}
		out.sample(m.cpu, m.labelPairs(p.PID, p.Comm, "mode", "user"), prometheus.CounterValue, p.UserSeconds)
		out.sample(m.cpu, m.labelPairs(p.PID, p.Comm, "mode", "system"), prometheus.CounterValue, p.SystemSeconds)
		send(m.rss, prometheus.GaugeValue, float64(p.ResidentBytes))
		send(m.swap, prometheus.GaugeValue, float64(p.SwapBytes))
		send(m.virt, prometheus.GaugeValue, float64(p.VirtualBytes))
		if t.Verdict == nil {
			continue
		}
		pv := t.Verdict.Processes[p.PID]
		if pv.HasWorkingSet {
			send(m.wss, prometheus.GaugeValue, float64(pv.WorkingSetBytes))
			send(m.demand, prometheus.GaugeValue, float64(pv.DemandBytes))
		}
		high := 0.0
		if pv.HighFault {
			high = 1
		}
		send(m.high, prometheus.GaugeValue, high)
	}
}

// skipKind leaves out the kinds a series would only pretend to know: with the
// probe, unknown until it happens (it is rare); on procfs alone, the kinds,
// since maj_flt does not tell them apart.
func skipKind(kind string, count uint64, withProbe bool) bool {
	if withProbe {
		return kind == readout.KindUnknown && count == 0
	}
	return kind != readout.KindUnknown
}
