package figures

import (
	"math"
	"slices"
	"testing"
)

func seq(n int, f func(i int) float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = f(i)
	}
	return s
}

func TestBezierProperties(t *testing.T) {
	noisy := func(i int) float64 { return 100 + 50*math.Sin(float64(i)*1.7) + float64(i%7)*9 }
	cases := []struct {
		name string
		m, n int
		y    func(i int) float64
	}{
		{"short noisy", 5, 50, noisy},
		{"one window", 12, 40, noisy},
		{"many windows", 61, 61, noisy},
		{"live page", 900, 900, noisy},
		{"fewer out than in", 900, 100, noisy},
		{"constant", 100, 300, func(int) float64 { return 42 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			xs := seq(c.m, func(i int) float64 { return float64(i) - float64(c.m) })
			ys := seq(c.m, c.y)
			bx, by := Bezier(xs, ys, c.n)
			if len(bx) != c.n || len(by) != c.n {
				t.Fatalf("got %d, %d points, want %d", len(bx), len(by), c.n)
			}
			if bx[0] != xs[0] || by[0] != ys[0] || bx[c.n-1] != xs[c.m-1] || by[c.n-1] != ys[c.m-1] {
				t.Errorf("endpoints (%g,%g)..(%g,%g), want (%g,%g)..(%g,%g)", bx[0], by[0], bx[c.n-1], by[c.n-1], xs[0], ys[0], xs[c.m-1], ys[c.m-1])
			}
			lo, hi := slices.Min(ys), slices.Max(ys)
			for i := range by {
				if by[i] < lo-1e-9 || by[i] > hi+1e-9 {
					t.Fatalf("point %d: y=%g outside the samples' range [%g, %g]", i, by[i], lo, hi)
				}
				if bx[i] < xs[0]-1e-9 || bx[i] > xs[c.m-1]+1e-9 {
					t.Fatalf("point %d: x=%g outside [%g, %g]", i, bx[i], xs[0], xs[c.m-1])
				}
				if i > 0 && bx[i] < bx[i-1]-1e-9 {
					t.Fatalf("x goes back at %d: %g after %g", i, bx[i], bx[i-1])
				}
			}
		})
	}
}

func TestBezierKeepsConstantsAndLines(t *testing.T) {
	xs := seq(100, func(i int) float64 { return float64(i) * 1.5 })
	flat := seq(100, func(int) float64 { return 7 })
	_, by := Bezier(xs, flat, 250)
	for i, y := range by {
		if math.Abs(y-7) > 1e-9 {
			t.Fatalf("constant 7 became %g at %d", y, i)
		}
	}
	line := seq(100, func(i int) float64 { return 3*xs[i] - 20 })
	bx, by := Bezier(xs, line, 250)
	for i := range bx {
		if want := 3*bx[i] - 20; math.Abs(by[i]-want) > 1e-9 {
			t.Fatalf("line: (%g, %g), want y=%g", bx[i], by[i], want)
		}
	}
}

func TestBezierSmoothsAStepAndNoise(t *testing.T) {
	xs := seq(60, func(i int) float64 { return float64(i) })
	step := seq(60, func(i int) float64 {
		if i < 30 {
			return 0
		}
		return 100
	})
	bx, by := Bezier(xs, step, 600)
	// Between the samples either side of the step the curve passes through
	// intermediate values instead of jumping.
	between := 0
	for i := range bx {
		if by[i] > 10 && by[i] < 90 {
			between++
		}
	}
	if between < 20 {
		t.Errorf("only %d of 600 points between 10 and 90: the step is not smoothed", between)
	}
	// Alternating noise around 50 is flattened.
	saw := seq(60, func(i int) float64 { return 50 + 40*float64(1-2*(i%2)) })
	_, by = Bezier(xs, saw, 60)
	var rawVar, smoothVar float64
	for i := 5; i < 55; i++ {
		rawVar += (saw[i] - 50) * (saw[i] - 50)
		smoothVar += (by[i] - 50) * (by[i] - 50)
	}
	if smoothVar > rawVar/10 {
		t.Errorf("noise variance %g after smoothing, %g before: want at least 10× less", smoothVar, rawVar)
	}
}

func TestBezierEdgeCases(t *testing.T) {
	if bx, by := Bezier(nil, nil, 10); bx != nil || by != nil {
		t.Errorf("no samples gave %v %v", bx, by)
	}
	if bx, _ := Bezier([]float64{1, 2}, []float64{1, 2}, 0); bx != nil {
		t.Errorf("n=0 gave %v", bx)
	}
	bx, by := Bezier([]float64{5}, []float64{9}, 3)
	if !slices.Equal(bx, []float64{5, 5, 5}) || !slices.Equal(by, []float64{9, 9, 9}) {
		t.Errorf("one sample: %v %v", bx, by)
	}
	// NaN samples are dropped, not spread.
	bx, by = Bezier([]float64{0, 1, 2, 3}, []float64{1, math.NaN(), 1, 1}, 20)
	for i := range by {
		if math.Abs(by[i]-1) > 1e-12 || math.IsNaN(bx[i]) {
			t.Fatalf("NaN leaked: (%g, %g)", bx[i], by[i])
		}
	}
}

func BenchmarkBezier900(b *testing.B) {
	x, _, _, in, _ := synthetic(900, -899)
	for b.Loop() {
		Bezier(x, in, 900)
	}
}
