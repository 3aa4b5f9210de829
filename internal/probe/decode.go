package probe

// Fault kinds, in the order of the BPF fault_kind enum and as in the kind label.
const (
	KindAnon    = "anon"
	KindFile    = "file"
	KindUnknown = "unknown" // the VMA lookup failed; rare, kept so totals still match maj_flt
)

// Kinds lists the fault kinds in the order of the BPF fault_kind enum.
var Kinds = []string{KindAnon, KindFile, KindUnknown}

// LatencySlots is the number of log2 nanosecond slots in a latency histogram.
const LatencySlots = len(thrashscopeLatencyHist{}.Slots)

// ProcessCounters are one process's cumulative counts since the probe saw it.
type ProcessCounters struct {
	MajorFaults      [3]uint64 // by kind, in Kinds order
	StallNanoseconds uint64
}

// MajorTotal is every major fault of the process, whatever its kind.
func (c ProcessCounters) MajorTotal() uint64 {
	return c.MajorFaults[0] + c.MajorFaults[1] + c.MajorFaults[2]
}

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
