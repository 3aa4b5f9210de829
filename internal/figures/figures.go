// Package figures draws thrashscope's figures with gonum/plot, to SVG or PNG:
// the paper's CPU and paging panels (Maziero et al. 2013), raw or
// Bézier-smoothed, and whatever else a run report or the live page needs. It
// sits at the end of the data flow and takes plain series, so the live page
// and the run reports draw alike.
package figures

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Series is one named curve.
type Series struct {
	Name string
	X, Y []float64
	// YErr, when set, draws each point with a ±YErr[i] error bar.
	YErr []float64
}

// Chart is one panel: curves over a shared x axis.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	// Smooth draws each curve Bézier-smoothed (Maziero et al. 2013, Fig 3)
	// instead of raw.
	Smooth bool
	// RefLine is an optional dashed horizontal reference line (e.g. 1 for
	// the working-set ratio).
	RefLine *float64
	// YMin and YMax fix the y range when set (e.g. 0..100 for %).
	YMin, YMax *float64
}

// Format is an image format.
type Format string

// The formats Render writes.
const (
	SVG Format = "svg"
	PNG Format = "png"
)

// Palette colours series by their index in a chart, so a curve keeps its
// colour between the raw and the smoothed panel and across small multiples.
var Palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, // brown
	color.RGBA{R: 0xe3, G: 0x77, B: 0xc2, A: 0xff}, // pink
	color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}, // cyan
}

// Text sizes, in points; readable when a 900-point-wide figure is shown at
// half its size in a README.
const (
	figureTitleSize = 14
	titleSize       = 13
	labelSize       = 11
	tickSize        = 10
	legendSize      = 10
)

// smoothPoints bounds the points drawn of a smoothed curve: more than a
// panel's width in points shows nothing new and only makes the SVG bigger.
const smoothPoints = 400

// Render draws the charts side by side in one image of the given size.
func Render(w io.Writer, f Format, width, height vg.Length, charts ...Chart) error {
	return RenderGrid(w, f, width, height, charts)
}

// RenderGrid draws rows of charts, each row side by side, in one image of the
// given size. Every row has as many columns as the longest one.
func RenderGrid(w io.Writer, f Format, width, height vg.Length, rows ...[]Chart) error {
	return RenderFigure(w, f, width, height, "", rows...)
}

// RenderFigure is RenderGrid under a title line naming the whole figure.
func RenderFigure(w io.Writer, f Format, width, height vg.Length, title string, rows ...[]Chart) error {
	cols := 0
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	if cols == 0 {
		return errors.New("figures: no charts to draw")
	}
	if width <= 0 || height <= 0 {
		return fmt.Errorf("figures: image size %v × %v: want both above zero", width, height)
	}
	var c interface {
		vg.CanvasSizer
		io.WriterTo
	}
	switch f {
	case SVG:
		c = vgsvg.New(width, height)
	case PNG:
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseBackgroundColor(color.White))}
	default:
		return fmt.Errorf("figures: format %q: want %q or %q", f, SVG, PNG)
	}
	dc := draw.New(c)
	if f == SVG {
		// vgsvg leaves the background transparent; dark pages would hide the axes.
		dc.SetColor(color.White)
		dc.Fill(dc.Rectangle.Path())
	}
	if title != "" {
		sty := text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, figureTitleSize),
			XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
		top := dc.Max.Y - vg.Points(6)
		dc.FillText(sty, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: top}, title)
		dc.Max.Y = top - sty.Height(title) - vg.Points(4)
	}
	tiles := draw.Tiles{Rows: len(rows), Cols: cols, PadX: vg.Points(6), PadY: vg.Points(6),
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	for r, row := range rows {
		for col, ch := range row {
			if err := ch.draw(tiles.At(dc, col, r)); err != nil {
				return err
			}
		}
	}
	_, err := c.WriteTo(w)
	return err
}

// draw draws the chart on c: the plot, then its legend on a white box so
// curves passing under it do not hide it.
func (ch Chart) draw(c draw.Canvas) error {
	p := ch.newPlot()
	legend := newLegend()
	drawn, err := ch.addSeries(p, &legend)
	if err != nil {
		return err
	}
	if ch.RefLine != nil {
		v := *ch.RefLine
		ref := plotter.NewFunction(func(float64) float64 { return v })
		ref.LineStyle = draw.LineStyle{Color: color.Gray{Y: 0x60}, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(5), vg.Points(3)}}
		p.Add(ref)
		p.Y.Min, p.Y.Max = min(p.Y.Min, v), max(p.Y.Max, v)
	}
	ch.setRanges(p, drawn)
	if drawn > 0 && ch.YMax == nil {
		// Headroom above the data for the legend in the top corner, so
		// no curve runs under it.
		r := legend.Rectangle(c)
		need := r.Max.Y - r.Min.Y + legend.TextStyle.FontExtents().Descent + vg.Points(10)
		dc := p.DataCanvas(c)
		if h := dc.Max.Y - dc.Min.Y; h > 0 && need < h/2 {
			p.Y.Max = p.Y.Min + (p.Y.Max-p.Y.Min)/(1-float64(need/h))
		}
	}

	p.Draw(c)
	if drawn > 0 {
		drawLegend(p.DataCanvas(c), legend)
	}
	return nil
}

// newPlot is the chart's plot with its title, labels, ticks and grid.
func (ch Chart) newPlot() *plot.Plot {
	p := plot.New()
	p.Title.Text = ch.Title
	p.Title.TextStyle.Font.Size = titleSize
	p.Title.Padding = vg.Points(4)
	p.X.Label.Text, p.Y.Label.Text = ch.XLabel, ch.YLabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = labelSize
		a.Tick.Label.Font.Size = tickSize
		a.Tick.Marker = siTicks{}
	}
	p.Add(plotter.NewGrid())
	return p
}

// newLegend is a legend for the top-right corner.
func newLegend() plot.Legend {
	legend := plot.NewLegend()
	legend.TextStyle.Font = font.From(plot.DefaultFont, legendSize)
	legend.Top = true
	legend.ThumbnailWidth = vg.Points(16)
	legend.Padding = vg.Points(1)
	legend.XOffs, legend.YOffs = -vg.Points(4), -vg.Points(4)
	return legend
}

// addSeries adds each series with points as a line (smoothed when the
// chart is, error bars when it has them) and its legend entry; it returns
// how many it drew.
func (ch Chart) addSeries(p *plot.Plot, legend *plot.Legend) (int, error) {
	drawn := 0
	for i, s := range ch.Series {
		if len(s.X) != len(s.Y) {
			return 0, fmt.Errorf("figures: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		if s.YErr != nil && len(s.YErr) != len(s.Y) {
			return 0, fmt.Errorf("figures: series %q has %d y values and %d errors", s.Name, len(s.Y), len(s.YErr))
		}
		xs, ys := s.X, s.Y
		if ch.Smooth && s.YErr == nil {
			xs, ys = Bezier(xs, ys, min(len(xs), smoothPoints))
		}
		pts := points(xs, ys)
		if len(pts) == 0 {
			continue
		}
		col := Palette[i%len(Palette)]
		l := &plotter.Line{XYs: pts}
		l.LineStyle = draw.LineStyle{Color: col, Width: vg.Points(1.6)}
		p.Add(l)
		legend.Add(s.Name, l)
		drawn++
		if s.YErr != nil {
			if err := addErrorBars(p, s, col); err != nil {
				return 0, err
			}
		}
	}
	return drawn, nil
}

// setRanges applies the chart's own bounds and keeps both axes non-empty;
// an empty chart still gets axes, so a page never shows a hole.
func (ch Chart) setRanges(p *plot.Plot, drawn int) {
	if drawn == 0 {
		p.X.Min, p.X.Max = 0, 1
		p.Y.Min, p.Y.Max = 0, 1
	}
	if ch.YMin != nil {
		p.Y.Min = *ch.YMin
	}
	if ch.YMax != nil {
		p.Y.Max = *ch.YMax
	}
	if p.Y.Max <= p.Y.Min {
		p.Y.Max = p.Y.Min + 1
	}
	if p.X.Max <= p.X.Min {
		p.X.Min, p.X.Max = p.X.Min-0.5, p.X.Min+0.5
	}
}

// drawLegend draws the legend in the data area's top-right corner on a
// translucent box. Legend.Rectangle ignores the offsets (and mirrors
// Left), so the box is placed here.
func drawLegend(dc draw.Canvas, legend plot.Legend) {
	r := legend.Rectangle(dc)
	pad := vg.Points(3)
	descent := legend.TextStyle.FontExtents().Descent
	var box vg.Rectangle
	box.Max.X = dc.Max.X + legend.XOffs + pad
	box.Min.X = box.Max.X - (r.Max.X - r.Min.X) - 2*pad
	box.Max.Y = dc.Max.Y + legend.YOffs + pad
	box.Min.Y = box.Max.Y - (r.Max.Y - r.Min.Y) - descent - 2*pad
	dc.SetColor(color.NRGBA{R: 0xff, G: 0xff, B: 0xff, A: 0xd8})
	dc.Fill(box.Path())
	legend.Draw(dc)
}

// points keeps the finite (x, y) pairs; gonum refuses NaN and Inf.
func points(xs, ys []float64) plotter.XYs {
	pts := make(plotter.XYs, 0, len(xs))
	for i := range min(len(xs), len(ys)) {
		if isFinite(xs[i]) && isFinite(ys[i]) {
			pts = append(pts, plotter.XY{X: xs[i], Y: ys[i]})
		}
	}
	return pts
}

// finite is points as two slices, for Bezier.
func finite(xs, ys []float64) (fx, fy []float64) {
	n := min(len(xs), len(ys))
	fx, fy = make([]float64, 0, n), make([]float64, 0, n)
	for i := range n {
		if isFinite(xs[i]) && isFinite(ys[i]) {
			fx, fy = append(fx, xs[i]), append(fy, ys[i])
		}
	}
	return fx, fy
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

type errPoints struct {
	plotter.XYs
	plotter.YErrors
}

func addErrorBars(p *plot.Plot, s Series, col color.Color) error {
	var ep errPoints
	for i := range s.X {
		if isFinite(s.X[i]) && isFinite(s.Y[i]) && isFinite(s.YErr[i]) {
			ep.XYs = append(ep.XYs, plotter.XY{X: s.X[i], Y: s.Y[i]})
			ep.YErrors = append(ep.YErrors, struct{ Low, High float64 }{s.YErr[i], s.YErr[i]})
		}
	}
	if len(ep.XYs) == 0 {
		return nil
	}
	bars, err := plotter.NewYErrorBars(ep)
	if err != nil {
		return fmt.Errorf("figures: error bars of %q: %w", s.Name, err)
	}
	bars.LineStyle = draw.LineStyle{Color: col, Width: vg.Points(1.2)}
	bars.CapWidth = vg.Points(6)
	dots, err := plotter.NewScatter(ep.XYs)
	if err != nil {
		return fmt.Errorf("figures: points of %q: %w", s.Name, err)
	}
	dots.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{}}
	p.Add(bars, dots)
	return nil
}

// siTicks put about five labelled ticks on round values (steps of 1, 2 or 5
// times a power of ten; gonum's default labels only two or three) with
// unlabelled ticks between, labelled with SI prefixes (40k, 1.5M) so an axis
// of swap-ins per second stays narrow.
type siTicks struct{}

func (siTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || !isFinite(lo) || !isFinite(hi) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
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
	var ticks []plot.Tick
	sub := step / float64(minor)
	for i := math.Ceil(lo / sub); i*sub <= hi+sub*1e-9; i++ {
		v := i * sub
		if math.Abs(v) < sub*1e-9 {
			v = 0
		}
		t := plot.Tick{Value: v}
		if int(math.Round(i))%minor == 0 {
			t.Label = siLabel(v)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

func abs(n int) int { return max(n, -n) }

func siLabel(v float64) string {
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
