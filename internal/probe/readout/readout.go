// Package readout is what thrashscope's BPF probes read out, without the
// means of loading them: fault kinds and counts, stall times, latency
// histograms, the probes' names and status, and a Snapshot of them all.
// Package probe fills them from the kernel; the sampler, the indicators and
// the metrics read them without linking the BPF loader.
package readout

import "time"

// Probe names, as in thrashscope_probe_up{probe}, in the order of the BPF
// probe_id enum (the index of probe_events_lost).
const (
	// perf event PAGE_FAULTS_MAJ, per tgid; the kind from raw_tp
	// mm_filemap_fault and the faulting mapping's class.
	MajorFaults = "major_faults"
	// raw_tp sched_switch and the vmscan reclaim begin/end tracepoints: the
	// exact parts of the memory stall (off CPU, and reclaim on CPU).
	MemoryStall = "memory_stall"
	// perf event CPU_CLOCK on each CPU while stalls occur: the sampled part
	// (on CPU in a stall outside reclaim).
	MemoryStallSample = "memory_stall_sample"
	// raw_tp page_fault_user/kernel, the start of each fault, while major
	// faults occur.
	FaultLatency = "fault_latency"
	// raw_tp sched_process_exit, map cleanup.
	ProcessExit = "process_exit"
)

// Names lists every probe in the order of the BPF probe_id enum.
var Names = []string{MajorFaults, MemoryStall, MemoryStallSample, FaultLatency, ProcessExit}

// Status is one probe's attach result.
type Status struct {
	Name     string
	Attached bool
	Required bool
	Detail   string // what it is attached to
	// Way is how its programs reach the kernel's data: "fast" or
	// "portable" (package probe's Way), "" on procfs alone; Since is the
	// oldest Linux its programs load on that way.
	Way, Since string
	Err        error
}

// Kind is a major fault's kind, in the order of the BPF fault_kind enum
// (package probe's tests hold the values to the generated enum).
type Kind int

// The kinds, as in the kind label.
const (
	Anon    Kind = 0 // private anonymous memory read back from swap
	Shmem   Kind = 1 // shared anonymous memory or tmpfs read back from swap
	File    Kind = 2 // a page-cache miss on a real file
	Unknown Kind = 3 // the mapping could not be looked up; rare, kept so totals still match maj_flt

	NumKinds = 4
)

// Label values of the kinds.
const (
	KindAnon    = "anon"
	KindShmem   = "shmem"
	KindFile    = "file"
	KindUnknown = "unknown"
)

// Kinds lists the kinds' label values in Kind order.
var Kinds = [NumKinds]string{Anon: KindAnon, Shmem: KindShmem, File: KindFile, Unknown: KindUnknown}

func (k Kind) String() string { return Kinds[k] }

// FaultCounts are major faults by kind.
type FaultCounts [NumKinds]uint64

// Total is every major fault, whatever its kind.
func (c FaultCounts) Total() uint64 {
	var n uint64
	for _, v := range c {
		n += v
	}
	return n
}

// SwapIns are the faults that read swap-backed memory back: anon and
// shmem. TPF's high-fault set counts these.
func (c FaultCounts) SwapIns() uint64 { return c[Anon] + c[Shmem] }

// StallTime is a process's memory-stall time, in the parts the probe
// measures it in; their sum is what PSI's memory "some" counts for a group
// holding only that process.
type StallTime struct {
	OffCPU  time.Duration // exact: off CPU with in_memstall set
	Reclaim time.Duration // exact: on CPU in direct or memcg reclaim
	Sampled time.Duration // sampled: on CPU in a stall outside reclaim
}

// Total is the whole stall.
func (s StallTime) Total() time.Duration { return s.OffCPU + s.Reclaim + s.Sampled }

// OnCPU is the part spent on CPU: reclaim, and the sampled rest.
func (s StallTime) OnCPU() time.Duration { return s.Reclaim + s.Sampled }

// Sub is the stall since earlier, part by part.
func (s StallTime) Sub(earlier StallTime) StallTime {
	return StallTime{OffCPU: s.OffCPU - earlier.OffCPU, Reclaim: s.Reclaim - earlier.Reclaim, Sampled: s.Sampled - earlier.Sampled}
}

// ProcessCounters are one process's cumulative counts since the probe saw it.
type ProcessCounters struct {
	MajorFaults FaultCounts
	Stall       StallTime
	// FaultService is the time its timed major faults took, from fault
	// entry to their accounting (see Histogram): stalled or not.
	FaultService time.Duration
}

// CgroupCounters are one cgroup's cumulative counts over every task that
// ran in it since the probe first saw one fault or stall there: major
// faults by kind, memory-stall time, and the major faults' service times
// (all kinds together).
type CgroupCounters struct {
	MajorFaults FaultCounts
	Stall       StallTime
	Latency     Histogram
}

// AtLeast is c with each counter no less than in last: a counter never
// goes back, though a read may miss counts on their way between two
// places (a CPU's slot and the map, the map and the removed queue).
func (c CgroupCounters) AtLeast(last CgroupCounters) CgroupCounters {
	for i := range c.MajorFaults {
		c.MajorFaults[i] = max(c.MajorFaults[i], last.MajorFaults[i])
	}
	c.Stall.OffCPU = max(c.Stall.OffCPU, last.Stall.OffCPU)
	c.Stall.Reclaim = max(c.Stall.Reclaim, last.Stall.Reclaim)
	c.Stall.Sampled = max(c.Stall.Sampled, last.Stall.Sampled)
	for i := range c.Latency.Slots {
		c.Latency.Slots[i] = max(c.Latency.Slots[i], last.Latency.Slots[i])
	}
	c.Latency.SumSeconds = max(c.Latency.SumSeconds, last.Latency.SumSeconds)
	return c
}

// LatencySlots is the number of log2 nanosecond slots in a latency histogram.
const LatencySlots = 40 // as latency_hist in the BPF C (held by package probe's tests)

// Histogram is a log2 histogram of major-fault service times: Slots[i]
// counts faults that took [2^i, 2^(i+1)) ns.
type Histogram struct {
	Slots      [LatencySlots]uint64
	SumSeconds float64
}

// Count is the number of observations.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, v := range h.Slots {
		n += v
	}
	return n
}

// CumulativeBuckets gives Prometheus-style cumulative buckets with upper
// bounds 2^(i+1) ns, in seconds, for slots first..last. Observations below
// slot first fold into the first bucket; those above last only into +Inf.
func (h Histogram) CumulativeBuckets(first, last int) map[float64]uint64 {
	buckets := make(map[float64]uint64, last-first+1)
	var cum uint64
	for i := 0; i <= last && i < LatencySlots; i++ {
		cum += h.Slots[i]
		if i >= first {
			buckets[float64(uint64(1)<<(i+1))/1e9] = cum
		}
	}
	return buckets
}

// Snapshot is everything the probes have counted so far.
type Snapshot struct {
	Processes map[uint32]ProcessCounters // by tgid; only processes the probes have seen
	Latency   map[string]Histogram       // by fault kind
	Lost      map[string]uint64          // by probe name
	// MappingLookups counts the swap-backed major faults whose mapping was
	// not in the probe's cache and had to be looked up (bpf_find_vma).
	MappingLookups uint64
	// Programs are the kernel's run statistics of each program; zero unless
	// kernel.bpf_stats_enabled is (or was) on.
	Programs []ProgramStats
	// Activity is what the on-demand hooks follow (see probe.Arm).
	Activity Activity
	// Cgroups are the counters of each cgroup a task faulted or stalled
	// in, by its id in the cgroup v2 hierarchy (its directory's inode
	// number); nil when per-cgroup accounting is off.
	Cgroups map[uint64]CgroupCounters
	// CgroupEventsLost counts the faults and stalls the full cgroup map
	// could not count.
	CgroupEventsLost uint64
	// RemovedCgroupsLost counts the removed cgroups whose last counts
	// (since the reader's last sample) the full queue to the reader could
	// not take.
	RemovedCgroupsLost uint64
}

// Activity is the running totals that say whether the host takes major
// faults and stalls on memory now: the major-fault perf events counted
// and the stalls the programs saw begin.
type Activity struct {
	MajorFaultEvents uint64
	StallsSeen       uint64
}

// ProgramStats are one BPF program's cumulative run count and time, which
// the kernel keeps while BPF statistics are enabled.
type ProgramStats struct {
	Name    string // the C function's name in bpf/ (one file per probe)
	Runs    uint64
	RunTime time.Duration
}
