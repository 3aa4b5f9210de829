package analysis

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
)

func secs(n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(i + 1)
	}
	return x
}

func TestSwapInEpisode(t *testing.T) {
	cases := []struct {
		name               string
		swapIn             []float64
		onset, recovery    float64 // 0: none
		threshold          float64
		wantNil, recovered bool
		floor              float64 // 0: MinSwapInThreshold
	}{
		{name: "quiet run", swapIn: []float64{0, 5, 80, 20, 0}, wantNil: true},
		// Peak 10000: threshold 1000. A two-sample blip at 3-4 s is not
		// sustained; the thrash runs 6-10 s; quiet from 11 s.
		{name: "blip then thrash", swapIn: []float64{0, 0, 5000, 5000, 0, 2000, 10000, 9000, 8000, 1000, 10, 0, 0, 0},
			onset: 6, recovery: 11, threshold: 1000, recovered: true},
		// A dip inside the thrash does not end it: recovery follows the
		// last sustained stretch.
		{name: "dip inside", swapIn: []float64{0, 4000, 4000, 4000, 0, 4000, 4000, 4000, 0, 0, 0},
			onset: 2, recovery: 9, threshold: 400, recovered: true},
		// Still high at the end: no recovery.
		{name: "ends thrashing", swapIn: []float64{0, 0, 500, 600, 700, 800},
			onset: 3, threshold: 100},
		// A single burst below the floor never counts.
		{name: "floor", swapIn: []float64{0, 90, 90, 90, 90, 0}, wantNil: true},
		// On a device of 120 reads a second the floor is 12: its plateau
		// at 90-120 is an episode, a trickle below 12 is not.
		{name: "a slow device's floor", swapIn: []float64{0, 5, 10, 90, 120, 110, 11, 8, 0, 0, 0},
			onset: 4, recovery: 7, threshold: 12, recovered: true, floor: 12},
		// Quiet samples at the very end, fewer than SustainSamples: not recovered.
		{name: "short tail", swapIn: []float64{0, 300, 300, 300, 0, 0}, onset: 2, threshold: 100},
		// A NaN (the parsers refuse one; this is the loop's own guard)
		// makes the threshold NaN: no episode, and the loop ends.
		{name: "NaN", swapIn: []float64{0, 300, math.NaN(), 300, 300, 0}, wantNil: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			floor := c.floor
			if floor == 0 {
				floor = MinSwapInThreshold
			}
			e := SwapInEpisode(secs(len(c.swapIn)), c.swapIn, floor)
			if c.wantNil {
				if e != nil {
					t.Fatalf("got %+v, want no episode", e)
				}
				return
			}
			if e == nil {
				t.Fatal("no episode")
			}
			if e.Source != "swap-in" || e.Onset != c.onset || e.Recovered != c.recovered || e.Recovery != c.recovery || e.Threshold != c.threshold {
				t.Errorf("got %+v, want onset %g recovery %g (recovered %v) threshold %g", e, c.onset, c.recovery, c.recovered, c.threshold)
			}
		})
	}
}

func TestDetectorEpisode(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tr := func(s float64, to string) run.Transition { return run.Transition{At: at(s), To: to} }
	rec := run.Record{StartedAt: t0, Transitions: []run.Transition{
		tr(18, "monitoring"), tr(21.5, "thrashing"), tr(30, "monitoring"), tr(31, "thrashing"), tr(44.25, "monitoring"), tr(47, "normal"),
	}}
	e := DetectorEpisode(rec)
	if e == nil || e.Onset != 21.5 || !e.Recovered || e.Recovery != 44.25 {
		t.Errorf("got %+v, want onset 21.5, recovery 44.25", e)
	}
	rec.Transitions = rec.Transitions[:4] // ends in thrashing
	if e := DetectorEpisode(rec); e == nil || e.Onset != 21.5 || e.Recovered {
		t.Errorf("still thrashing at the end: %+v", e)
	}
	rec.Transitions = rec.Transitions[:1] // monitoring only
	if e := DetectorEpisode(rec); e != nil {
		t.Errorf("monitoring only: %+v", e)
	}
}

func TestConsumerLateness(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	p := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	spec, _ := run.Resolve(run.Spec{Preset: "e4"}) // t_s 100 ms: late beyond 1.1 s
	rec := run.Record{Spec: spec, Consumers: []run.ConsumerRecord{
		{Index: 0, ActualStart: p(0), ActualEnd: p(time.Second), LatenessSeconds: 0.05, Exit: "ok"},
		{Index: 1, ActualStart: p(0), ActualEnd: p(time.Second), LatenessSeconds: 3.1, Exit: "ok"},
		{Index: 2, ActualStart: p(0), ActualEnd: p(time.Second), LatenessSeconds: 1.2, Exit: "ok"},
		{Index: 3, ActualStart: p(0), ActualEnd: p(time.Second), LatenessSeconds: 0, Exit: "oom-killed"}, // did not finish
		{Index: 4}, // never started
		{Index: 5, ActualStart: p(0), ActualEnd: p(time.Second), LatenessSeconds: 1.05, Exit: "ok"},
	}}
	l := ConsumerLateness(rec)
	if l.Finished != 4 || l.Late != 2 || l.Max != 3.1 || l.MaxIndex != 1 || math.Abs(l.Mean-(0.05+3.1+1.2+1.05)/4) > 1e-12 || math.Abs(l.LateCutoff-1.1) > 1e-12 {
		t.Errorf("got %+v", l)
	}
}

func TestSummarisePeaks(t *testing.T) {
	spec, _ := run.Resolve(run.Spec{Preset: "e4", Scale: ptr(0.1)})
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	end := t0.Add(61 * time.Second)
	rec := run.Record{ID: "r", Spec: spec, State: run.StateCompleted, StartedAt: t0, EndedAt: &end,
		Consumers: []run.ConsumerRecord{{Index: 0, Exit: "oom-killed"}, {Index: 1, Exit: "ok"}}}
	row := func(at, in, out, some, full, stall float64) store.Row {
		var r store.Row
		r.ElapsedSeconds, r.SwapInPagesPerSecond, r.SwapOutPagesPerSecond = at, in, out
		r.PressureSomePercent, r.PressureFullPercent, r.ConsumerStallPercent = some, full, stall
		return r
	}
	s := Summarise(rec, []store.Row{row(1, 0, 0, 0, 0, -1), row(2, 46600, 12, 84, 20, -1), row(3, 100, 45200, 10, 61, -1)})
	if s.PeakSwapIn != 46600 || s.PeakSwapInAt != 2 || s.PeakSwapOut != 45200 || s.PeakPSISome != 84 || s.PeakPSIFull != 61 {
		t.Errorf("peaks: %+v", s)
	}
	if s.PeakConsumerStall != -1 {
		t.Errorf("consumer stall unknown throughout, got %g", s.PeakConsumerStall)
	}
	if len(s.OOMKilled) != 1 || s.OOMKilled[0] != 0 || s.DurationSeconds != 61 {
		t.Errorf("oom %v, duration %g", s.OOMKilled, s.DurationSeconds)
	}
	// e4 at scale 0.1: 10 consumers fit in the limit, the 11th (i=10)
	// starts at 10 + 10 = 20 s.
	if !s.HasPlannedOverload || s.PlannedOverload != 20 {
		t.Errorf("planned overload %v %g, want 20 s", s.HasPlannedOverload, s.PlannedOverload)
	}
}

func ptr[T any](v T) *T { return &v }

func TestSwapInFloor(t *testing.T) {
	for spec, want := range map[string]float64{
		`{"preset":"e2"}`:                            MinSwapInThreshold,
		`{"preset":"e2","swap_device":"hdd-2013"}`:   12,
		`{"preset":"e2","swap_device":"cloud-3000"}`: MinSwapInThreshold,
		// Bytes alone do not lower it: the rule counts pages, not I/Os.
		`{"preset":"e2","swap_device":{"write_iops":10,"read_bps":1048576}}`: MinSwapInThreshold,
	} {
		var s run.Spec
		if err := json.Unmarshal([]byte(spec), &s); err != nil {
			t.Fatal(err)
		}
		r, err := run.Resolve(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := SwapInFloor(r); got != want {
			t.Errorf("%s: floor %g, want %g", spec, got, want)
		}
	}
}
