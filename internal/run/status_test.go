package run

import (
	"testing"
	"time"
)

// A cycle counts in the first bucket at or above its duration, as
// Prometheus's le is inclusive, and Add sums two runs' cycles.
func TestCycleHistogram(t *testing.T) {
	var a, b CycleHistogram
	a.Observe(500 * time.Microsecond) // on the first bound
	a.Observe(3 * time.Millisecond)
	b.Observe(time.Minute + 6*time.Second) // past the last bound, 65.536 s
	b.Observe(4 * time.Millisecond)
	sum := a.Clone()
	sum.Add(b)
	sum.Add(CycleHistogram{})
	cum := sum.Cumulative()
	if len(cum) != len(CycleBuckets) || CycleBuckets[len(CycleBuckets)-1] != 65.536 {
		t.Fatalf("%d buckets up to %g s, want 18 up to 65.536 s", len(cum), CycleBuckets[len(CycleBuckets)-1])
	}
	for le, want := range map[float64]uint64{0.0005: 1, 0.001: 1, 0.002: 1, 0.004: 3, 32.768: 3, 65.536: 3} {
		if cum[le] != want {
			t.Errorf("%g s: %d cycles at or below, want %d", le, cum[le], want)
		}
	}
	if sum.Count != 4 || a.Count != 2 || len(a.Counts) != len(CycleBuckets)+1 || a.Counts[3] != 1 {
		t.Errorf("count %d (a %d), a's counts %v: Add must not change what it was cloned from", sum.Count, a.Count, a.Counts)
	}
}
