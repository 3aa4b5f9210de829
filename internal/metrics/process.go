package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

// processes exports the tracked processes only (top-K plus the active run's
// consumers): the sampler bounds the set, and a process that exits is
// simply absent from the next sample, so its series go away.
type processes struct {
	major, minor, stall, stallOff, cpu, rss, swap, virt, wss, demand, high *prometheus.Desc
}

func newProcesses() *processes {
	return &processes{
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

func (m *processes) update(t *pipeline.Tick, ch chan<- prometheus.Metric) {
	s := t.Reading
	for _, p := range s.Processes {
		pid, comm := strconv.Itoa(p.PID), p.Comm
		for i, kind := range readout.Kinds {
			if skipKind(kind, p.MajorFaults[i], len(s.Probes) > 0) {
				continue
			}
			send(ch, m.major, prometheus.CounterValue, float64(p.MajorFaults[i]), pid, comm, kind)
		}
		send(ch, m.minor, prometheus.CounterValue, float64(p.MinorFaults), pid, comm)
		if p.HasStall {
			send(ch, m.stall, prometheus.CounterValue, p.Stall.Total().Seconds(), pid, comm)
			send(ch, m.stallOff, prometheus.CounterValue, p.Stall.OffCPU.Seconds(), pid, comm)
		}
		send(ch, m.cpu, prometheus.CounterValue, p.UserSeconds, pid, comm, "user")
		send(ch, m.cpu, prometheus.CounterValue, p.SystemSeconds, pid, comm, "system")
		send(ch, m.rss, prometheus.GaugeValue, float64(p.ResidentBytes), pid, comm)
		send(ch, m.swap, prometheus.GaugeValue, float64(p.SwapBytes), pid, comm)
		send(ch, m.virt, prometheus.GaugeValue, float64(p.VirtualBytes), pid, comm)
		if t.Verdict == nil {
			continue
		}
		pv := t.Verdict.Processes[p.PID]
		if pv.HasWorkingSet {
			send(ch, m.wss, prometheus.GaugeValue, float64(pv.WorkingSetBytes), pid, comm)
			send(ch, m.demand, prometheus.GaugeValue, float64(pv.DemandBytes), pid, comm)
		}
		high := 0.0
		if pv.HighFault {
			high = 1
		}
		send(ch, m.high, prometheus.GaugeValue, high, pid, comm)
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
