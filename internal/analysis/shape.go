package analysis

import (
	"math"

	"github.com/thrashscope/thrashscope/internal/run"
)

// Shape is where a run's paging fell against its plan: for a run on a
// compressed timeline as for the paper's.
type Shape struct {
	// PeakAt is when swap-ins/s, averaged over ±t_c, peak (s since start).
	PeakAt float64
	// PlateauFrom and PlateauTo are when every consumer is planned active.
	PlateauFrom, PlateauTo float64
	// PlateauMean is the mean swap-ins/s over the plateau.
	PlateauMean float64
	// IntervalSeconds is t_c.
	IntervalSeconds float64
	// Overload is when the planned demand first passes the limit, and
	// UnderLimit when it falls back under it (s since start).
	Overload, UnderLimit float64
	// Episode is the swap-in episode (summary.txt's rule); nil when none.
	Episode *Episode
	// EpisodeSeconds is the swap-in episode's length and RiseSeconds the
	// time from its onset to the smoothed peak; NaN unless it recovered.
	EpisodeSeconds, RiseSeconds float64
	// RecoveryLagSeconds is from the planned demand falling under the
	// limit to the episode's recovery (swap-ins below 10 % of the peak);
	// NaN when either did not happen.
	RecoveryLagSeconds float64
}

// series is one run's swap-in series, its summary, and the shape read
// from them.
type series struct {
	spec            run.Resolved
	tc              float64 // t_c, seconds
	elapsed, swapIn []float64
	sum             Summary
}

func newSeries(r Recorded) *series {
	c := &series{spec: r.Record.Spec, tc: r.Record.Spec.Interval.D().Seconds()}
	for _, row := range r.Samples {
		c.elapsed = append(c.elapsed, row.ElapsedSeconds)
		c.swapIn = append(c.swapIn, row.SwapInPagesPerSecond)
	}
	c.sum = Summarise(r.Record, r.Samples)
	return c
}

func (c *series) shape() Shape {
	from, to := c.plateau()
	m := Shape{PeakAt: c.smoothPeakAt(), PlateauFrom: from, PlateauTo: to, PlateauMean: c.plateauMean(), IntervalSeconds: c.tc, Episode: c.sum.SwapIn}
	if d, ok := c.spec.Onset(); ok {
		m.Overload = d.Seconds()
	}
	m.UnderLimit, _ = c.underLimit()
	m.EpisodeSeconds, m.RiseSeconds, _ = c.durationRise()
	m.RecoveryLagSeconds, _ = c.recoveryLag()
	return m
}

// SmoothedSwapIns are a run's swap-ins/s averaged over ±t_c around each
// sample, at the samples' elapsed seconds.
func SmoothedSwapIns(r Recorded) (elapsed, smooth []float64) {
	c := newSeries(r)
	return c.elapsed, c.smooth()
}

func (c *series) plateau() (from, to float64) {
	f, t := c.spec.Plateau()
	return f.Seconds(), t.Seconds()
}

// smooth averages swap-ins/s over ±t_c around each sample: one consumer
// interval either side, the scale of the schedule's own steps.
func (c *series) smooth() []float64 {
	return movingMean(c.elapsed, c.swapIn, c.tc)
}

func movingMean(xs, ys []float64, half float64) []float64 {
	out := make([]float64, len(ys))
	lo, sum := 0, 0.0
	hi := 0
	for i, x := range xs {
		for hi < len(xs) && xs[hi] <= x+half {
			sum += ys[hi]
			hi++
		}
		for xs[lo] < x-half {
			sum -= ys[lo]
			lo++
		}
		out[i] = sum / float64(hi-lo)
	}
	return out
}

func (c *series) smoothPeakAt() float64 {
	s := c.smooth()
	if len(s) == 0 {
		return math.NaN()
	}
	return c.elapsed[argmax(s)]
}

func argmax(xs []float64) int {
	best := 0
	for i, v := range xs {
		if v > xs[best] {
			best = i
		}
	}
	return best
}

// plateauMean is the mean swap-ins/s while every consumer is planned active.
func (c *series) plateauMean() float64 {
	from, to := c.plateau()
	var sum float64
	n := 0
	for i, t := range c.elapsed {
		if t >= from && t <= to {
			sum += c.swapIn[i]
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// durationRise is the swap-in episode's length and the time from its onset
// to the smoothed peak.
func (c *series) durationRise() (duration, rise float64, ok bool) {
	ep := c.sum.SwapIn
	if ep == nil || !ep.Recovered {
		return math.NaN(), math.NaN(), false
	}
	return ep.Recovery - ep.Onset, max(0, c.smoothPeakAt()-ep.Onset), true
}

// underLimit is when the planned demand falls back under the memory limit:
// the end of the consumer after which those left fit.
func (c *series) underLimit() (float64, bool) {
	s := c.spec
	for i := range s.Consumers {
		left := int64(s.Consumers - i - 1)
		if left*s.SizeBytes <= s.MemoryLimitBytes {
			return s.Slot(i).End.Seconds(), true
		}
	}
	return 0, false
}

// recoveryLag is the time from demand falling under the limit to the
// swap-in episode's recovery (swap-ins below 10 % of the peak).
func (c *series) recoveryLag() (float64, bool) {
	ep := c.sum.SwapIn
	at, ok := c.underLimit()
	if ep == nil || !ep.Recovered || !ok {
		return math.NaN(), false
	}
	return max(0, ep.Recovery-at), true
}
