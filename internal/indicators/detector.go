package indicators

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Detector states, as thrashscope_thrashing_state.
const (
	Normal     = 0
	Monitoring = 1
	Thrashing  = 2
)

// StateNames are the states' names, as detector_transitions_total{to}.
var StateNames = [...]string{Normal: "normal", Monitoring: "monitoring", Thrashing: "thrashing"}

// DetectorConfig holds TPF's thresholds (Jiang and Zhang, 2001) and the PSI
// ones thrashscope adds.
type DetectorConfig struct {
	// A process joins the high-fault set above PFHigh faults/s and leaves
	// it below PFLow (TPF: 10 and 1).
	PFHigh, PFLow float64
	// CPU utilisation below CPULow (%) with two or more high-fault processes
	// is thrashing; it is over once utilisation recovers past CPUHigh (TPF:
	// 40 and 80).
	CPULow, CPUHigh float64
	// PSI memory full share (%) above PSIFullHigh is thrashing too, over once
	// it falls below PSIFullLow.
	PSIFullHigh, PSIFullLow float64
	// MinHigh is how many high-fault processes make the host worth watching
	// (TPF: 2).
	MinHigh int
	// Eviction makes thrashing need the host to evict pages in the same
	// interval. TPF's rule has no such term: on an idle host, two
	// processes reading back their swapped-out memory at once (a timer
	// waking them) are a thrash to it, with nothing going out
	// (bench/alerts, readback). False is TPF as published.
	Eviction bool
}

// DefaultDetectorConfig is TPF's published thresholds, plus PSI full above
// 10 % (clearing below 5 %), and eviction in the interval.
func DefaultDetectorConfig() DetectorConfig {
	return DetectorConfig{PFHigh: 10, PFLow: 1, CPULow: 40, CPUHigh: 80, PSIFullHigh: 10, PSIFullLow: 5, MinHigh: 2, Eviction: true}
}

// Validate says which threshold is wrong.
func (c DetectorConfig) Validate() error {
	switch {
	case c.PFLow < 0 || c.PFHigh <= c.PFLow:
		return fmt.Errorf("--detector.pf-high=%g must be above --detector.pf-low=%g, and both non-negative", c.PFHigh, c.PFLow)
	case c.CPULow < 0 || c.CPUHigh <= c.CPULow || c.CPUHigh > 100:
		return fmt.Errorf("--detector.cpu-high=%g must be above --detector.cpu-low=%g, within 0-100", c.CPUHigh, c.CPULow)
	case c.PSIFullLow < 0 || c.PSIFullHigh <= c.PSIFullLow || c.PSIFullHigh > 100:
		return fmt.Errorf("--detector.psi-full=%g must be above its clearing level %g, within 0-100", c.PSIFullHigh, c.PSIFullLow)
	case c.MinHigh < 1:
		return fmt.Errorf("the high-fault count must be at least 1, got %d", c.MinHigh)
	}
	return nil
}

// Input is one interval's reading.
type Input struct {
	// FaultRates are the counted major faults per second of each tracked
	// process, by pid.
	FaultRates map[int]float64
	// CPUBusy is utilisation over the interval, 0-100.
	CPUBusy float64
	// PSIFull is the share of the interval with every task stalled on
	// memory, 0-100; valid when HasPSI.
	PSIFull float64
	HasPSI  bool
	// Evicted is the pages reclaim took over the interval, per second.
	Evicted float64
}

// Transition is a state change, with the high-fault processes then.
type Transition struct {
	From, To  int
	HighFault []int // pids, sorted
	Why       string
	// At and Names ("comm/pid" of HighFault) are the reading's, filled in
	// by Indicators.Judge.
	At    time.Time
	Names []string
}

// Detector is TPF's three-state detector with hysteresis on every signal:
// the set has PF high/low, CPU starvation latches below CPULow and clears
// past CPUHigh, PSI latches above PSIFullHigh and clears below PSIFullLow.
// Thrashing holds while either latch is set, so it does not flap when one
// signal wavers around its threshold.
type Detector struct {
	cfg         DetectorConfig
	state       int
	high        map[int]bool
	cpuStarved  bool
	psiStalled  bool
	transitions [3]uint64
}

// NewDetector starts in normal.
func NewDetector(cfg DetectorConfig) *Detector {
	return &Detector{cfg: cfg, high: map[int]bool{}}
}

// State is the current state.
func (d *Detector) State() int { return d.state }

// HighFault reports whether pid is in the high-fault set.
func (d *Detector) HighFault(pid int) bool { return d.high[pid] }

// HighCount is the size of the high-fault set.
func (d *Detector) HighCount() int { return len(d.high) }

// Transitions counts the states entered, by state.
func (d *Detector) Transitions() [3]uint64 { return d.transitions }

// Step takes one interval and returns the transition it caused, if any.
func (d *Detector) Step(in Input) *Transition {
	for pid := range d.high {
		if _, tracked := in.FaultRates[pid]; !tracked {
			delete(d.high, pid) // exited or no longer tracked
		}
	}
	for pid, r := range in.FaultRates {
		switch {
		case r > d.cfg.PFHigh:
			d.high[pid] = true
		case r < d.cfg.PFLow:
			delete(d.high, pid)
		}
	}
	switch {
	case in.CPUBusy < d.cfg.CPULow:
		d.cpuStarved = true
	case in.CPUBusy > d.cfg.CPUHigh:
		d.cpuStarved = false
	}
	if in.HasPSI {
		switch {
		case in.PSIFull > d.cfg.PSIFullHigh:
			d.psiStalled = true
		case in.PSIFull < d.cfg.PSIFullLow:
			d.psiStalled = false
		}
	} else {
		d.psiStalled = false
	}

	from := d.state
	enough := len(d.high) >= d.cfg.MinHigh
	var why string
	switch {
	case !enough:
		d.state = Normal
		why = fmt.Sprintf("%d high-fault processes, fewer than %d", len(d.high), d.cfg.MinHigh)
	case from == Normal:
		// TPF's order: watch first; thrashing needs a second interval.
		d.state = Monitoring
		why = fmt.Sprintf("%d high-fault processes", len(d.high))
	case (d.cpuStarved || d.psiStalled) && (from == Thrashing || !d.cfg.Eviction || in.Evicted > 0):
		// Once thrashing, an interval with nothing evicted does not end it:
		// the latches do.
		d.state = Thrashing
		why = fmt.Sprintf("%d high-fault processes with CPU busy %.0f%% and PSI memory full %.0f%%, %.0f pages/s evicted", len(d.high), in.CPUBusy, in.PSIFull, in.Evicted)
	default:
		d.state = Monitoring
		why = fmt.Sprintf("%d high-fault processes; CPU busy %.0f%%, PSI memory full %.0f%%, %.0f pages/s evicted", len(d.high), in.CPUBusy, in.PSIFull, in.Evicted)
	}
	if d.state == from {
		return nil
	}
	d.transitions[d.state]++
	return &Transition{From: from, To: d.state, HighFault: slices.Sorted(maps.Keys(d.high)), Why: why}
}
