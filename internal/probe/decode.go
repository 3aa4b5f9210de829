package probe

import "time"

// Kind is a major fault's kind, in the order of the BPF fault_kind enum.
type Kind int

// The kinds, as in the kind label.
const (
	Anon    Kind = Kind(thrashscopeFaultKindFAULT_ANON)    // private anonymous memory read back from swap
	Shmem   Kind = Kind(thrashscopeFaultKindFAULT_SHMEM)   // shared anonymous memory or tmpfs read back from swap
	File    Kind = Kind(thrashscopeFaultKindFAULT_FILE)    // a page-cache miss on a real file
	Unknown Kind = Kind(thrashscopeFaultKindFAULT_UNKNOWN) // the mapping could not be looked up; rare, kept so totals still match maj_flt

	NumKinds = int(thrashscopeFaultKindFAULT_KINDS)
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

func decodeStall(v thrashscopeStallTime) StallTime {
	return StallTime{OffCPU: time.Duration(v.OffCpuNs), Reclaim: time.Duration(v.ReclaimNs), Sampled: time.Duration(v.SampledNs)}
}

// ProcessCounters are one process's cumulative counts since the probe saw it.
type ProcessCounters struct {
	MajorFaults FaultCounts
	Stall       StallTime
}

// LatencySlots is the number of log2 nanosecond slots in a latency histogram.
const LatencySlots = len(thrashscopeLatencyHist{}.Slots)

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

// mergeLatency sums one kind's per-CPU histograms.
func mergeLatency(perCPU []thrashscopeLatencyHist) Histogram {
	var h Histogram
	var sumNS uint64
	for _, c := range perCPU {
		for i, v := range c.Slots {
			h.Slots[i] += v
		}
		sumNS += c.SumNs
	}
	h.SumSeconds = float64(sumNS) / 1e9
	return h
}

func sum(perCPU []uint64) uint64 {
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n
}

// unseenEvents is how many events the perf counters saw that the program did
// not, never decreasing. The counters are read before the program's tally,
// so a fault that lands between the two reads makes the gap look smaller,
// never larger: the figure can lag, but it never reports a loss that did not
// happen.
func unseenEvents(prev, perfCount, seen uint64) uint64 {
	if perfCount > seen && perfCount-seen > prev {
		return perfCount - seen
	}
	return prev
}
