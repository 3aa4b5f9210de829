package probe

import (
	"time"

	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

func decodeStall(v thrashscopeStallTime) readout.StallTime {
	return readout.StallTime{OffCPU: time.Duration(v.OffCpuNs), Reclaim: time.Duration(v.ReclaimNs), Sampled: time.Duration(v.SampledNs)}
}

// mergeLatency sums one kind's per-CPU histograms.
func mergeLatency(perCPU []thrashscopeLatencyHist) readout.Histogram {
	var h readout.Histogram
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

// decodeCgroup turns a cgroup's map value into its counters.
func decodeCgroup(v thrashscopeCgroupStats) readout.CgroupCounters {
	return readout.CgroupCounters{
		MajorFaults: readout.FaultCounts(v.Faults),
		Stall:       decodeStall(v.Stall),
		Latency:     mergeLatency([]thrashscopeLatencyHist{v.Latency}),
	}
}
