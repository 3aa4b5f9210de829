package indicators

import (
	"slices"
	"testing"
)

func TestDetectorStates(t *testing.T) {
	two := map[int]float64{1: 50, 2: 50}
	type step struct {
		in    Input
		state int
		high  int
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"quiet host stays normal", []step{
			{Input{FaultRates: map[int]float64{1: 0, 2: 0}, CPUBusy: 5}, Normal, 0},
		}},
		{"one faulting process is not enough", []step{
			{Input{FaultRates: map[int]float64{1: 500, 2: 0}, CPUBusy: 10, PSIFull: 50, HasPSI: true}, Normal, 1},
		}},
		{"two high then CPU starves: monitoring, thrashing", []step{
			{Input{FaultRates: two, CPUBusy: 90}, Monitoring, 2},
			{Input{FaultRates: two, CPUBusy: 30}, Thrashing, 2},
		}},
		{"TPF order: normal goes through monitoring even when starved", []step{
			{Input{FaultRates: two, CPUBusy: 10}, Monitoring, 2},
			{Input{FaultRates: two, CPUBusy: 10}, Thrashing, 2},
		}},
		{"PSI full alone makes thrashing, with busy CPUs", []step{
			{Input{FaultRates: two, CPUBusy: 95, PSIFull: 2, HasPSI: true}, Monitoring, 2},
			{Input{FaultRates: two, CPUBusy: 95, PSIFull: 30, HasPSI: true}, Thrashing, 2},
		}},
		{"CPU between the thresholds does not clear thrashing (hysteresis)", []step{
			{Input{FaultRates: two, CPUBusy: 90}, Monitoring, 2},
			{Input{FaultRates: two, CPUBusy: 30}, Thrashing, 2},
			{Input{FaultRates: two, CPUBusy: 60}, Thrashing, 2},
			{Input{FaultRates: two, CPUBusy: 45}, Thrashing, 2},
			{Input{FaultRates: two, CPUBusy: 85}, Monitoring, 2},
			{Input{FaultRates: two, CPUBusy: 60}, Monitoring, 2},
		}},
		{"PSI between its levels does not clear thrashing", []step{
			{Input{FaultRates: two, CPUBusy: 95, HasPSI: true}, Monitoring, 2},
			{Input{FaultRates: two, CPUBusy: 95, PSIFull: 20, HasPSI: true}, Thrashing, 2},
			{Input{FaultRates: two, CPUBusy: 95, PSIFull: 7, HasPSI: true}, Thrashing, 2},
			{Input{FaultRates: two, CPUBusy: 95, PSIFull: 3, HasPSI: true}, Monitoring, 2},
		}},
		{"both latches: thrashing until both clear", []step{
			{Input{FaultRates: two, CPUBusy: 95, HasPSI: true}, Monitoring, 2},
			{Input{FaultRates: two, CPUBusy: 20, PSIFull: 40, HasPSI: true}, Thrashing, 2},
			{Input{FaultRates: two, CPUBusy: 90, PSIFull: 40, HasPSI: true}, Thrashing, 2},
			{Input{FaultRates: two, CPUBusy: 90, PSIFull: 1, HasPSI: true}, Monitoring, 2},
		}},
		{"fault rates between PF low and high keep the set (hysteresis)", []step{
			{Input{FaultRates: two, CPUBusy: 90}, Monitoring, 2},
			{Input{FaultRates: map[int]float64{1: 5, 2: 5}, CPUBusy: 90}, Monitoring, 2},
			{Input{FaultRates: map[int]float64{1: 0.5, 2: 5}, CPUBusy: 90}, Normal, 1},
		}},
		{"a rate between the levels does not join the set", []step{
			{Input{FaultRates: map[int]float64{1: 50, 2: 5}, CPUBusy: 10}, Normal, 1},
		}},
		{"thrashing falls straight to normal when the set shrinks", []step{
			{Input{FaultRates: two, CPUBusy: 90}, Monitoring, 2},
			{Input{FaultRates: two, CPUBusy: 10}, Thrashing, 2},
			{Input{FaultRates: map[int]float64{1: 50}, CPUBusy: 10}, Normal, 1},
		}},
		{"an exited process leaves the set", []step{
			{Input{FaultRates: two, CPUBusy: 90}, Monitoring, 2},
			{Input{FaultRates: map[int]float64{1: 50}, CPUBusy: 90}, Normal, 1},
		}},
		{"no PSI: the CPU signal alone decides", []step{
			{Input{FaultRates: two, CPUBusy: 95, PSIFull: 90}, Monitoring, 2},
			{Input{FaultRates: two, CPUBusy: 95, PSIFull: 90}, Monitoring, 2},
		}},
	}
	// TPF's rule as published, and the default's with the host evicting
	// all along: the same states.
	tpf := DefaultDetectorConfig()
	tpf.Eviction = false
	for _, evicted := range []float64{0, 100} {
		for _, c := range cases {
			cfg := tpf
			if evicted > 0 {
				cfg = DefaultDetectorConfig()
			}
			d := NewDetector(cfg)
			for i, s := range c.steps {
				s.in.Evicted = evicted
				d.Step(s.in)
				if d.State() != s.state || d.HighCount() != s.high {
					t.Errorf("%s (evicting %g pages/s), step %d: state %s with %d high, want %s with %d", c.name, evicted, i,
						StateNames[d.State()], d.HighCount(), StateNames[s.state], s.high)
				}
			}
		}
	}
}

// Two processes reading back their swapped-out memory on an idle host,
// nothing evicted meanwhile: TPF's rule calls it a thrash, the default
// watches. Once the host evicts as it reads back, it is one, and an
// interval with nothing evicted does not end it.
func TestDetectorNeedsEviction(t *testing.T) {
	two := map[int]float64{1: 8000, 2: 8000}
	for _, c := range []struct {
		eviction bool
		evicted  []float64
		want     []int
	}{
		{false, []float64{0, 0, 0}, []int{Monitoring, Thrashing, Thrashing}},
		{true, []float64{0, 0, 0}, []int{Monitoring, Monitoring, Monitoring}},
		{true, []float64{0, 300, 0}, []int{Monitoring, Thrashing, Thrashing}},
	} {
		cfg := DefaultDetectorConfig()
		cfg.Eviction = c.eviction
		d := NewDetector(cfg)
		for i, e := range c.evicted {
			d.Step(Input{FaultRates: two, CPUBusy: 20, Evicted: e})
			if d.State() != c.want[i] {
				t.Errorf("eviction %v, evicted %v: step %d %s, want %s", c.eviction, c.evicted, i, StateNames[d.State()], StateNames[c.want[i]])
			}
		}
	}
}

func TestDetectorTransitions(t *testing.T) {
	d := NewDetector(DefaultDetectorConfig())
	two := map[int]float64{7: 50, 3: 50}
	if tr := d.Step(Input{FaultRates: two, CPUBusy: 90}); tr == nil || tr.From != Normal || tr.To != Monitoring || !slices.Equal(tr.HighFault, []int{3, 7}) {
		t.Errorf("first transition %+v", tr)
	}
	if tr := d.Step(Input{FaultRates: two, CPUBusy: 90}); tr != nil {
		t.Errorf("no change, yet %+v", tr)
	}
	if tr := d.Step(Input{FaultRates: two, CPUBusy: 10, Evicted: 50}); tr == nil || tr.To != Thrashing || tr.Why == "" {
		t.Errorf("thrashing transition %+v", tr)
	}
	d.Step(Input{FaultRates: map[int]float64{}, CPUBusy: 10})
	if got := d.Transitions(); got != [3]uint64{1, 1, 1} {
		t.Errorf("transitions %v, want one into each state", got)
	}
	if d.HighFault(3) || d.HighCount() != 0 {
		t.Errorf("after every process left: pid 3 high %v, %d high, want none", d.HighFault(3), d.HighCount())
	}
}

func TestDetectorConfigValidate(t *testing.T) {
	if err := DefaultDetectorConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := DefaultDetectorConfig()
	bad.PFHigh, bad.PFLow = 1, 10
	if err := bad.Validate(); err == nil {
		t.Error("pf-high below pf-low accepted")
	}
	bad = DefaultDetectorConfig()
	bad.CPUHigh = 120
	if err := bad.Validate(); err == nil {
		t.Error("cpu-high over 100 accepted")
	}
}
