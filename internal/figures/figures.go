// Package figures draws thrashscope's figures, package chart's charts, with
// gonum/plot to SVG or PNG for the run reports and comparisons: the paper's
// CPU and paging panels (Maziero et al. 2013), raw or Bézier-smoothed, in
// grids under a title. It sits at the end of the data flow. The daemon does
// not link it: gonum/plot parses its fonts as it starts (package chart
// draws the live page's figures).
package figures

import (
	"errors"
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/thrashscope/thrashscope/internal/chart"
)

// The chart itself is package chart's, shared with the live page.
type (
	Series = chart.Series
	Chart  = chart.Chart
)

// Palette colours series by their index in a chart (package chart's).
var Palette = chart.Palette

// CPUChart and PagingChart are the paper's figures (package chart's).
var (
	CPUChart    = chart.CPUChart
	PagingChart = chart.PagingChart
)

// Text sizes, in points (package chart's).
const (
	figureTitleSize = chart.FigureTitleSize
	titleSize       = chart.TitleSize
	labelSize       = chart.LabelSize
	tickSize        = chart.TickSize
	legendSize      = chart.LegendSize
)

// Format is an image format.
type Format string

// The formats Render writes.
const (
	SVG Format = "svg"
	PNG Format = "png"
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
			if err := drawChart(ch, tiles.At(dc, col, r)); err != nil {
				return err
			}
		}
	}
	_, err := c.WriteTo(w)
	return err
}

// draw draws the chart on c: the plot, then its legend on a white box so
// curves passing under it do not hide it.
func drawChart(ch Chart, c draw.Canvas) error {
	p := newPlot(ch)
	legend := newLegend()
	drawn, err := addSeries(ch, p, &legend)
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
	setRanges(ch, p, drawn)
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
func newPlot(ch Chart) *plot.Plot {
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
func addSeries(ch Chart, p *plot.Plot, legend *plot.Legend) (int, error) {
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
func setRanges(ch Chart, p *plot.Plot, drawn int) {
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

func isFinite(v float64) bool { return chart.IsFinite(v) }

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

// siTicks are package chart's round, SI-labelled ticks as gonum/plot's.
type siTicks struct{}

func (siTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := chart.Ticks(lo, hi)
	if ts == nil {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	out := make([]plot.Tick, len(ts))
	for i, t := range ts {
		out[i] = plot.Tick{Value: t.Value, Label: t.Label}
	}
	return out
}
