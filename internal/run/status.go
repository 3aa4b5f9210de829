package run

import (
	"slices"
	"time"

	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// Status is what the run side shows the metrics: the most recent run, the
// outcomes of the runs since the start, and the consumers' write cycles.
type Status struct {
	// Last: there is a most recent run, and the fields up to Outcomes
	// describe it.
	Last       bool
	ID, Preset string
	Active     bool
	Progress   Progress
	Policy     PolicyState
	// SwapDevice is the run's emulated swap device, and SwapThrottled
	// the directions the kernel's throttle held (none for none).
	SwapDevice    swapdev.Spec
	SwapThrottled []string

	// Outcomes counts the runs that ended, by their final state.
	Outcomes map[string]uint64
	// WriteErrors counts failed writes of run records and tables.
	WriteErrors uint64
	// Cycles are the durations of every consumer's write cycles, over
	// every run since the start.
	Cycles CycleHistogram
}

// OutcomeNames are the final states a run ends in, so that each count
// exists from 0.
var OutcomeNames = []string{StateCompleted, StateAborted, StateFailed}

// CycleBuckets are the upper bounds of a CycleHistogram's buckets, in
// seconds: 0.5 ms doubling to about 65 s.
var CycleBuckets = func() []float64 {
	b := make([]float64, 18)
	for i := range b {
		b[i] = 0.0005 * float64(uint64(1)<<i)
	}
	return b
}()

// CycleHistogram counts write cycles by duration, in CycleBuckets; the last
// count is of the cycles beyond the last bound.
type CycleHistogram struct {
	Counts []uint64
	Sum    float64 // seconds
	Count  uint64
}

// Observe counts one cycle.
func (h *CycleHistogram) Observe(d time.Duration) {
	if h.Counts == nil {
		h.Counts = make([]uint64, len(CycleBuckets)+1)
	}
	s := d.Seconds()
	i, _ := slices.BinarySearch(CycleBuckets, s)
	h.Counts[i]++
	h.Sum += s
	h.Count++
}

// Add counts o's cycles too.
func (h *CycleHistogram) Add(o CycleHistogram) {
	if o.Count == 0 {
		return
	}
	if h.Counts == nil {
		h.Counts = make([]uint64, len(CycleBuckets)+1)
	}
	for i, n := range o.Counts {
		h.Counts[i] += n
	}
	h.Sum += o.Sum
	h.Count += o.Count
}

// Clone is a copy that shares nothing with h.
func (h CycleHistogram) Clone() CycleHistogram {
	h.Counts = slices.Clone(h.Counts)
	return h
}

// Cumulative is the count of cycles at or below each bound, as
// Prometheus's buckets are.
func (h CycleHistogram) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(CycleBuckets))
	var n uint64
	for i, le := range CycleBuckets {
		if i < len(h.Counts) {
			n += h.Counts[i]
		}
		out[le] = n
	}
	return out
}
