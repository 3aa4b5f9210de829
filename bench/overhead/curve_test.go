package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestSlope(t *testing.T) {
	for _, c := range []struct {
		x, y []float64
		want float64
	}{
		{[]float64{1, 2, 3}, []float64{2, 4, 6}, 2},
		{[]float64{1000, 10000, 100000}, []float64{0.5, 0.5, 0.5}, 0},
		{[]float64{1, 3, 10, 30, 100}, []float64{1.1, 1.3, 2, 4, 11}, 0.1},
		{[]float64{5, 5}, []float64{1, 2}, 0}, // x does not vary
		{[]float64{5}, []float64{1}, 0},
	} {
		if got := slope(c.x, c.y); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("slope(%v, %v) = %v, want %v", c.x, c.y, got, c.want)
		}
	}
}

func TestParseCurvesRefusesBadInput(t *testing.T) {
	good := func() curveConfig { return curveConfig{PerWorkloadRate: 200, Window: 10 * time.Second} }
	for _, c := range []struct{ curves, rates, counts, want string }{
		{"faults,bogus", "1000", "1", "unknown curve"},
		{"faults", "1000,0", "1", "--curve.rates"},
		{"faults", "abc", "1", "--curve.rates"},
		{"workloads", "1000", "1,500", "--curve.workloads"},
	} {
		cc := good()
		err := parseCurves(&cc, c.curves, c.rates, c.counts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseCurves(%q, %q, %q) = %v, want an error naming %s", c.curves, c.rates, c.counts, err, c.want)
		}
	}
	cc := good()
	cc.Window = 100 * time.Millisecond
	if err := parseCurves(&cc, "faults", "1000", "1"); err == nil {
		t.Error("a 100 ms window was accepted: the CPU clock's tick is 10 ms")
	}
	cc = good()
	if err := parseCurves(&cc, "faults, workloads", "1000,1e5", "1,100"); err != nil || len(cc.Curves) != 2 || cc.Rates[1] != 1e5 || cc.Workloads[1] != 100 {
		t.Errorf("parseCurves of good input = %v, %+v", err, cc)
	}
	cc = good()
	if err := parseCurves(&cc, "", "bogus", "bogus"); err != nil || len(cc.Curves) != 0 {
		t.Errorf("no --curves: %v, %+v; the steps are not read then", err, cc)
	}
}

// TestPacerHoldsItsRate: 2,000 ops at 10,000 a second take 200 ms, not
// the microseconds they would unpaced.
func TestPacerHoldsItsRate(t *testing.T) {
	p := newPacer(10_000)
	start := time.Now()
	for range 2000 {
		p.wait()
	}
	if took := time.Since(start); took < 190*time.Millisecond || took > 2*time.Second {
		t.Errorf("2,000 ops at 10,000 a second took %v, want about 200 ms", took)
	}
	var none *pacer = newPacer(0)
	none.wait() // a nil pacer never waits
}

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999.6: "1,000", 1234567: "1,234,567", -4321: "-4,321", 100000: "100,000"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}
