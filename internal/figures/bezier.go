package figures

import "math"

// bezierWindow is how many samples each Bézier piece takes as its control
// points: about 16 s of a run, enough to flatten second-to-second noise
// while a 60 s thrash keeps its shape.
//
// Why pieces: a single Bézier over a whole series (as gnuplot's "smooth
// bezier" draws it) averages over about √n/2 samples in the middle and
// over none at the ends, so a 60-sample run, a 1510-sample run and the live
// page's 900 points would each be smoothed differently, and the live page's
// newest edge hardly at all; de Casteljau over n points also costs O(n²).
// Pieces of a fixed size smooth every series alike, at O(n) cost.
const bezierWindow = 16

// Bezier returns n points along the Bézier curve whose control points are the
// samples (Maziero et al. 2013, Fig 3), built piecewise so every part of a
// series is smoothed alike (see bezierWindow).
//
// A piecewise curve cuts the samples into runs of bezierWindow; each run is
// one Bézier piece, with the midpoints to the neighbouring runs as its first
// and last control points, so pieces meet with matching tangents. Near those
// joints a piece follows only the two samples around the joint, so two such
// curves, staggered by half a window, are cross-faded with weights that vanish
// at each curve's own joints: every point is smoothed over about a window.
//
// Every output point is a convex combination of samples: the curve keeps the
// first and last sample, stays within the samples' range, and leaves
// constants and straight lines as they are. Non-finite samples are dropped;
// extra values of the longer slice are ignored.
func Bezier(xs, ys []float64, n int) (bx, by []float64) {
	if n <= 0 {
		return nil, nil
	}
	px, py := finite(xs, ys)
	m := len(px)
	if m == 0 {
		return nil, nil
	}
	bx, by = make([]float64, n), make([]float64, n)
	if m == 1 || n == 1 {
		for i := range n {
			bx[i], by[i] = px[0], py[0]
		}
		return bx, by
	}
	a := newPiecewise(px, py, bezierWindow)
	b := newPiecewise(px, py, bezierWindow/2)
	last := float64(m - 1)
	for j := range n {
		u := last * float64(j) / float64(n-1)
		if j == n-1 {
			u = last // no rounding short of the last sample
		}
		xa, ya, ta := a.at(u)
		xb, yb, tb := b.at(u)
		// sin² of the phase within each piece: zero at the piece's joints.
		wa, wb := math.Pow(math.Sin(math.Pi*ta), 2), math.Pow(math.Sin(math.Pi*tb), 2)
		if s := wa + wb; s > 1e-12 {
			bx[j], by[j] = (wa*xa+wb*xb)/s, (wa*ya+wb*yb)/s
		} else {
			// Both at a joint: only at the ends, where both are the sample.
			bx[j], by[j] = (xa+xb)/2, (ya+yb)/2
		}
	}
	return bx, by
}

// piecewise is a chain of Bézier pieces over consecutive runs of samples.
type piecewise struct {
	px, py []float64
	// bounds[i] is the first sample of piece i; bounds[len-1] is m.
	bounds []int
	cur    int
	// The current piece's control points, its span in sample-index units
	// and scratch for bernstein.
	cx, cy, wx, wy []float64
	from, to       float64
}

// newPiecewise cuts the samples into pieces of window samples, the first
// one first samples long; a short tail joins the piece before it.
func newPiecewise(px, py []float64, first int) *piecewise {
	m := len(px)
	bounds := []int{0}
	for b := first; b < m; b += bezierWindow {
		bounds = append(bounds, b)
	}
	if len(bounds) > 1 && m-bounds[len(bounds)-1] < bezierWindow/2 {
		bounds = bounds[:len(bounds)-1]
	}
	bounds = append(bounds, m)
	size := 2*bezierWindow + 2
	p := &piecewise{px: px, py: py, bounds: bounds, cur: -1,
		cx: make([]float64, 0, size), cy: make([]float64, 0, size),
		wx: make([]float64, size), wy: make([]float64, size)}
	p.load(0)
	return p
}

// load makes piece k current. Its span runs from the joint before it to the
// joint after it, at half-sample positions (the midpoints), or to the ends.
func (p *piecewise) load(k int) {
	p.cur = k
	m := len(p.px)
	lo, hi := p.bounds[k], p.bounds[k+1]
	p.cx, p.cy = p.cx[:0], p.cy[:0]
	p.from, p.to = 0, float64(m-1)
	if lo > 0 {
		p.cx = append(p.cx, (p.px[lo-1]+p.px[lo])/2)
		p.cy = append(p.cy, (p.py[lo-1]+p.py[lo])/2)
		p.from = float64(lo) - 0.5
	}
	p.cx = append(p.cx, p.px[lo:hi]...)
	p.cy = append(p.cy, p.py[lo:hi]...)
	if hi < m {
		p.cx = append(p.cx, (p.px[hi-1]+p.px[hi])/2)
		p.cy = append(p.cy, (p.py[hi-1]+p.py[hi])/2)
		p.to = float64(hi) - 0.5
	}
}

// at evaluates the curve at sample position u (0 to m-1, increasing from
// call to call) and returns the phase t within its piece.
func (p *piecewise) at(u float64) (x, y, t float64) {
	for p.cur < len(p.bounds)-2 && u > p.to {
		p.load(p.cur + 1)
	}
	t = min(max((u-p.from)/(p.to-p.from), 0), 1)
	x, y = bernstein(p.cx, p.cy, p.wx, p.wy, t)
	return x, y, t
}

// bernstein evaluates the Bézier curve with control points (cx, cy) at t in
// Bernstein form, O(k) where de Casteljau is O(k²). With at most two windows
// of points the binomials stay small and every weight is positive, so there
// is no cancellation; tp and up are scratch for the powers of t and 1-t.
func bernstein(cx, cy, tp, up []float64, t float64) (x, y float64) {
	d := len(cx) - 1
	if t <= 0 || d == 0 {
		return cx[0], cy[0]
	}
	if t >= 1 {
		return cx[d], cy[d]
	}
	tp, up = tp[:d+1], up[:d+1]
	tp[0], up[0] = 1, 1
	for i := 1; i <= d; i++ {
		tp[i], up[i] = tp[i-1]*t, up[i-1]*(1-t)
	}
	c, sum := 1.0, 0.0 // C(d, i), and the weights' sum, 1 but for rounding
	for i := 0; i <= d; i++ {
		w := c * tp[i] * up[d-i]
		x += w * cx[i]
		y += w * cy[i]
		sum += w
		c = c * float64(d-i) / float64(i+1)
	}
	return x / sum, y / sum
}
