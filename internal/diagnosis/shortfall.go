package diagnosis

import "github.com/thrashscope/thrashscope/internal/indicators"

// Demand is what a thrashing group wants and holds, as the observer reads
// it: the working set of its processes in their own time, and its charge
// in memory and in swap.
type Demand struct {
	// WorkingSetBytes is the sum of its processes' demands
	// (process_working_set_demand_bytes); -1 when not measured.
	WorkingSetBytes int64 `json:"working_set_bytes"`
	// ResidentBytes and SwapBytes are its memory.current and its swap
	// (memory.swap.current; v1 memsw less usage); -1 unread.
	ResidentBytes int64 `json:"resident_bytes"`
	SwapBytes     int64 `json:"swap_bytes"`
	// HeldBytes is what its processes hold, their footprints summed (Pss,
	// SwapPss, and their shared file mappings' pages out); 0 when none
	// was measured. Saturated says a process's demand is a floor: the
	// thrash took the most of its window the estimate scales by.
	HeldBytes int64 `json:"held_bytes"`
	Saturated bool  `json:"saturated"`
}

// add counts a process's working set in.
func (d *Demand) add(p indicators.ProcessVerdict) {
	d.WorkingSetBytes = max(d.WorkingSetBytes, 0) + int64(p.DemandBytes)
	d.HeldBytes += int64(p.FootprintBytes)
	d.Saturated = d.Saturated || p.Saturated
}

// footprint is what the group holds in memory and swap; -1 unread. Its
// fall, not the working set's, says the demand is going away (a process
// that exited or freed memory): under a heavy thrash the working set
// estimate moves by a fifth between samples while nothing changes.
func (d Demand) footprint() int64 {
	if d.ResidentBytes < 0 || d.SwapBytes < 0 {
		return -1
	}
	return d.ResidentBytes + d.SwapBytes
}

// demandTolerance is the share the measured demand may be off either way:
// its plateau read −3 % to +12 % of the arithmetic on e4 at scale 0.1
// (docs/metrics.md), widened to a round tenth.
const demandTolerance = 0.10

// Shortfall is how much more memory the binding limit would need to hold
// the working set, with an interval; 0 when it holds it.
type Shortfall struct {
	Bytes     int64 `json:"bytes"`
	LowBytes  int64 `json:"low_bytes"`
	HighBytes int64 `json:"high_bytes"`
	// Basis says what the estimate rests on.
	Basis string `json:"basis"`
}

// ShortfallOf is what the binding limit l lacks for the group's demand d.
// Under a shared limit (an ancestor's, the host's) the others' charge is
// not the group's to use: the group has the limit less what the others
// hold. The point is the measured demand; the interval from its
// tolerance below, no lower than what the group holds in memory now (it
// thrashes, so it wants more), to all it holds in memory and swap where it
// has swap, else the tolerance above (a page-cache thrash has no swap to
// bound it).
func ShortfallOf(l Limit, d Demand) Shortfall {
	room := l.Bytes
	if l.Kind == LimitAncestor || l.Kind == LimitHost {
		others := l.UsedBytes - max(d.ResidentBytes, 0)
		room -= max(others, 0)
	}
	resident := max(d.ResidentBytes, 0)
	swap := max(d.SwapBytes, 0)
	var s Shortfall
	var point, low, high int64
	if d.WorkingSetBytes >= 0 {
		point = d.WorkingSetBytes
		low = max(int64(float64(point)*(1-demandTolerance)), resident)
		high = int64(float64(point) * (1 + demandTolerance))
		if swap > 0 {
			// All it holds is the most it can need: the interval
			// reaches it, so that a limit raised to its top holds every
			// page the group has (the demand's point is an estimate,
			// and read half the truth or less under a heavy thrash
			// before the faults' time counted as lost).
			high = resident + swap
		}
		s.Basis = "the working set of its processes in their own time"
		if d.Saturated && d.HeldBytes > high {
			// Its demand is a floor, so the interval reaches all its
			// processes hold, the pages of the files they map that are
			// out too: a page-cache thrash has no swap to bound it, and
			// read −75 % with the top at a tenth over the point, its
			// limit raised to that top thrashing again (bench/diagnosis
			// file).
			high = d.HeldBytes
			s.Basis += ", at least (a process stalled most of its time)"
		}
	} else {
		// No working set measured: what it holds is all there is to go
		// by, and the interval runs from what is resident to all of it.
		point, low, high = resident+swap, resident, resident+swap
		s.Basis = "what it holds in memory and swap (no working set measured)"
	}
	high = max(high, point, low)
	low = min(low, point)
	s.Bytes, s.LowBytes, s.HighBytes = max(point-room, 0), max(low-room, 0), max(high-room, 0)
	return s
}
