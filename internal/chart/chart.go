// Package chart is what a figure shows, apart from how it is drawn: a
// chart's curves, bounds and reference line, the paper's CPU and paging
// charts (Maziero et al. 2013), the palette and the round, SI-labelled
// ticks. It sits at the end of the data flow and takes plain series.
//
// The live page draws a Chart as SVG here (WriteSVG), text left to the
// browser, so the daemon carries no fonts and no plotting library; package
// figures draws the same Chart with gonum/plot to PNG and SVG for the run
// reports. Both use this package's palette and ticks, so they look alike.
package chart

import (
	"image/color"
	"math"
	"strconv"
)

// Series is one named curve.
type Series struct {
	Name string
	X, Y []float64
	// YErr, when set, draws each point with a ±YErr[i] error bar (package
	// figures; WriteSVG draws the curve alone).
	YErr []float64
}

// Chart is one panel: curves over a shared x axis.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	// Smooth draws each curve Bézier-smoothed (Maziero et al. 2013, Fig 3)
	// instead of raw (package figures).
	Smooth bool
	// RefLine is an optional dashed horizontal reference line (e.g. 1 for
	// the working-set ratio).
	RefLine *float64
	// YMin and YMax fix the y range when set (e.g. 0..100 for %).
	YMin, YMax *float64
}

// Palette colours series by their index in a chart, so a curve keeps its
// colour between the raw and the smoothed panel and across small multiples.
var Palette = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
	{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, // brown
	{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff}, // pink
	{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}, // cyan
}

// Text sizes, in points; readable when a 900-point-wide figure is shown at
// half its size in a README.
const (
	FigureTitleSize = 14
	TitleSize       = 13
	LabelSize       = 11
	TickSize        = 10
	LegendSize      = 10
)

// CPUChart is the paper's CPU figure (Maziero et al. 2013, Figs 4, 6, 8, 10):
// user and system CPU in % of all CPUs over time in seconds.
func CPUChart(x, user, system []float64) Chart {
	lo, hi := 0.0, 100.0
	return Chart{
		Title:  "CPU usage",
		XLabel: "time (s)", YLabel: "CPU (% of all CPUs)",
		Series: []Series{{Name: "user", X: x, Y: user}, {Name: "system", X: x, Y: system}},
		YMin:   &lo, YMax: &hi,
	}
}

// PagingChart is the paper's paging figure (Maziero et al. 2013, Figs 5, 7,
// 9, 11): pages swapped in and out per second over time in seconds.
func PagingChart(x, swapIn, swapOut []float64) Chart {
	lo := 0.0
	return Chart{
		Title:  "Paging activity",
		XLabel: "time (s)", YLabel: "pages/s",
		Series: []Series{{Name: "swap-in", X: x, Y: swapIn}, {Name: "swap-out", X: x, Y: swapOut}},
		YMin:   &lo,
	}
}

// Tick is a tick mark on an axis; only labelled ones get a grid line.
type Tick struct {
	Value float64
	Label string
}

// Ticks puts about five labelled ticks on round values in [lo, hi] (steps
// of 1, 2 or 5 times a power of ten) with unlabelled ticks between,
// labelled with SI prefixes (40k, 1.5M) so an axis of swap-ins per second
// stays narrow. An empty or non-finite range has none.
func Ticks(lo, hi float64) []Tick {
	if !(hi > lo) || !IsFinite(lo) || !IsFinite(hi) {
		return nil
	}
	// The round step giving closest to six labels (the larger on a tie).
	step, minor, best := 0.0, 0, math.MaxInt
	e := math.Floor(math.Log10(hi - lo))
	for k := e - 2; k <= e+1; k++ {
		for _, m := range []struct {
			f     float64
			minor int
		}{{1, 5}, {2, 4}, {5, 5}} {
			st := m.f * math.Pow(10, k)
			n := int(math.Floor(hi/st+1e-9) - math.Ceil(lo/st-1e-9) + 1)
			if d := abs(n - 6); d < best || (d == best && st > step) {
				step, minor, best = st, m.minor, d
			}
		}
	}
	var ticks []Tick
	sub := step / float64(minor)
	for i := math.Ceil(lo / sub); i*sub <= hi+sub*1e-9; i++ {
		v := i * sub
		if math.Abs(v) < sub*1e-9 {
			v = 0
		}
		t := Tick{Value: v}
		if int(math.Round(i))%minor == 0 {
			t.Label = SILabel(v)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

func abs(n int) int { return max(n, -n) }

// SILabel writes v with an SI prefix past ten thousand: 40k, 1.5M, 2G.
func SILabel(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return strconv.FormatFloat(v/1e9, 'g', 4, 64) + "G"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// IsFinite is neither NaN nor ±Inf: a point a curve can pass through.
func IsFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
