package chart

import (
	"bufio"
	"encoding/xml"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"
)

// Margins and marks of WriteSVG, in points.
const (
	pad        = 6
	majorTick  = 5
	minorTick  = 2.5
	curveWidth = 1.6
	// charWidth is a sans-serif character's width over its size, near
	// enough to leave room for the y axis's tick labels; the browser lays
	// the text out itself.
	charWidth = 0.6
)

// WriteSVG draws the chart as an SVG line chart of width × height points:
// axes with round ticks and a grid, each series a curve in its palette
// colour (a gap where a value is not finite), the reference line dashed, a
// legend in the top-right corner. Its text is SVG text in the page's
// sans-serif font, laid out by the browser, so no font is loaded here.
func WriteSVG(w io.Writer, width, height float64, c Chart) error {
	if !(width > 0) || !(height > 0) {
		return fmt.Errorf("chart: image size %g × %g: want both above zero", width, height)
	}
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("chart: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
	}
	g := newGeometry(width, height, c)
	if g.right-g.left < 10 || g.bottom-g.top < 10 {
		return errors.New("chart: the image is too small for axes and labels")
	}
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%spt" height="%spt" viewBox="0 0 %s %s" font-family="sans-serif">`,
		num(width), num(height), num(width), num(height))
	fmt.Fprintf(b, `<title>%s</title><rect width="100%%" height="100%%" fill="#fff"/>`, esc(c.Title))
	fmt.Fprintf(b, `<defs><clipPath id="data"><rect x="%s" y="%s" width="%s" height="%s"/></clipPath></defs>`,
		num(g.left), num(g.top), num(g.right-g.left), num(g.bottom-g.top))
	g.writeAxes(b, c)
	if c.RefLine != nil {
		y := g.y(*c.RefLine)
		fmt.Fprintf(b, `<path d="M%s %sH%s" stroke="#606060" stroke-dasharray="5 3" clip-path="url(#data)"/>`, num(g.left), num(y), num(g.right))
	}
	var legend []int
	for i, s := range c.Series {
		if d := g.curve(s); d != "" {
			fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="%s" stroke-linejoin="round" clip-path="url(#data)"/>`, d, hex(Palette[i%len(Palette)]), num(curveWidth))
			legend = append(legend, i)
		}
	}
	for k, i := range legend {
		y := g.top + pad + float64(k+1)*LegendSize*1.3
		fmt.Fprintf(b, `<text x="%s" y="%s" font-size="%d" text-anchor="end" stroke="#fff" stroke-width="3" stroke-linejoin="round" paint-order="stroke">%s</text>`,
			num(g.right-28), num(y), LegendSize, esc(c.Series[i].Name))
		fmt.Fprintf(b, `<path d="M%s %sh16" stroke="%s" stroke-width="%s"/>`, num(g.right-24), num(y-LegendSize*0.35), hex(Palette[i%len(Palette)]), num(curveWidth))
	}
	b.WriteString("</svg>")
	return b.Flush()
}

// geometry maps data to the image: the data area's edges in points and
// the axes' ranges.
type geometry struct {
	left, right, top, bottom float64
	xlo, xhi, ylo, yhi       float64
	xticks, yticks           []Tick
}

func newGeometry(width, height float64, c Chart) geometry {
	g := geometry{xlo: math.Inf(1), xhi: math.Inf(-1), ylo: math.Inf(1), yhi: math.Inf(-1)}
	drawn := 0
	for _, s := range c.Series {
		n := 0
		for i := range s.X {
			if IsFinite(s.X[i]) && IsFinite(s.Y[i]) {
				g.xlo, g.xhi = min(g.xlo, s.X[i]), max(g.xhi, s.X[i])
				g.ylo, g.yhi = min(g.ylo, s.Y[i]), max(g.yhi, s.Y[i])
				n++
			}
		}
		if n > 0 {
			drawn++
		}
	}
	if drawn == 0 {
		g.xlo, g.xhi, g.ylo, g.yhi = 0, 1, 0, 1
	}
	if c.RefLine != nil && IsFinite(*c.RefLine) {
		g.ylo, g.yhi = min(g.ylo, *c.RefLine), max(g.yhi, *c.RefLine)
	}
	if c.YMin != nil {
		g.ylo = *c.YMin
	}
	if c.YMax != nil {
		g.yhi = *c.YMax
	}
	if !(g.yhi > g.ylo) {
		g.yhi = g.ylo + 1
	}
	if !(g.xhi > g.xlo) {
		g.xlo, g.xhi = g.xlo-0.5, g.xlo+0.5
	}

	g.top = pad + TitleSize + pad
	g.bottom = height - (pad + LabelSize + pad + TickSize + majorTick + 2)
	g.right = width - 2*pad
	if drawn > 0 && c.YMax == nil {
		// Headroom above the data for the legend in the top corner, so
		// no curve runs under it.
		need := float64(drawn)*LegendSize*1.3 + 2*pad
		if h := g.bottom - g.top; need < h/2 {
			g.yhi = g.ylo + (g.yhi-g.ylo)/(1-need/h)
		}
	}
	g.xticks, g.yticks = Ticks(g.xlo, g.xhi), Ticks(g.ylo, g.yhi)
	widest := 0
	for _, t := range g.yticks {
		widest = max(widest, len(t.Label))
	}
	g.left = pad + LabelSize + pad + float64(widest)*charWidth*TickSize + majorTick + 3
	return g
}

func (g geometry) x(v float64) float64 {
	return g.left + (v-g.xlo)/(g.xhi-g.xlo)*(g.right-g.left)
}

func (g geometry) y(v float64) float64 {
	return g.bottom - (v-g.ylo)/(g.yhi-g.ylo)*(g.bottom-g.top)
}

// writeAxes writes the grid at the labelled ticks, both axes with their
// ticks and labels, and the title.
func (g geometry) writeAxes(b *bufio.Writer, c Chart) {
	var grid, marks strings.Builder
	for _, t := range g.xticks {
		x := num(g.x(t.Value))
		if t.Label == "" {
			fmt.Fprintf(&marks, "M%s %sv%s", x, num(g.bottom), num(minorTick))
			continue
		}
		fmt.Fprintf(&grid, "M%s %sV%s", x, num(g.top), num(g.bottom))
		fmt.Fprintf(&marks, "M%s %sv%d", x, num(g.bottom), majorTick)
		fmt.Fprintf(b, `<text x="%s" y="%s" font-size="%d" text-anchor="middle">%s</text>`, x, num(g.bottom+majorTick+2+TickSize), TickSize, esc(t.Label))
	}
	for _, t := range g.yticks {
		y := num(g.y(t.Value))
		if t.Label == "" {
			fmt.Fprintf(&marks, "M%s %sh-%s", num(g.left), y, num(minorTick))
			continue
		}
		fmt.Fprintf(&grid, "M%s %sH%s", num(g.left), y, num(g.right))
		fmt.Fprintf(&marks, "M%s %sh-%d", num(g.left), y, majorTick)
		fmt.Fprintf(b, `<text x="%s" y="%s" font-size="%d" text-anchor="end" dy="0.35em">%s</text>`, num(g.left-majorTick-2), y, TickSize, esc(t.Label))
	}
	if grid.Len() > 0 {
		fmt.Fprintf(b, `<path d="%s" stroke="#d9d9d9" stroke-width="0.5"/>`, grid.String())
	}
	fmt.Fprintf(b, `<path d="M%s %sV%sH%s" fill="none" stroke="#000" stroke-width="0.8"/>`, num(g.left), num(g.top), num(g.bottom), num(g.right))
	if marks.Len() > 0 {
		fmt.Fprintf(b, `<path d="%s" stroke="#000" stroke-width="0.5"/>`, marks.String())
	}
	fmt.Fprintf(b, `<text x="%s" y="%s" font-size="%d" text-anchor="middle">%s</text>`, num((g.left+g.right)/2), num(pad+TitleSize), TitleSize, esc(c.Title))
	fmt.Fprintf(b, `<text x="%s" y="%s" font-size="%d" text-anchor="middle">%s</text>`, num((g.left+g.right)/2), num(g.bottom+majorTick+2+TickSize+pad+LabelSize), LabelSize, esc(c.XLabel))
	ly := num((g.top + g.bottom) / 2)
	fmt.Fprintf(b, `<text transform="translate(%s %s) rotate(-90)" font-size="%d" text-anchor="middle">%s</text>`, num(pad+LabelSize), ly, LabelSize, esc(c.YLabel))
}

// curve is the path of a series, broken where a point is not finite; empty
// when it has no finite point.
func (g geometry) curve(s Series) string {
	var d strings.Builder
	pen := false
	for i := range s.X {
		if !IsFinite(s.X[i]) || !IsFinite(s.Y[i]) {
			pen = false
			continue
		}
		op := "L"
		if !pen {
			op = "M"
		}
		d.WriteString(op)
		d.WriteString(num(g.x(s.X[i])))
		d.WriteByte(' ')
		d.WriteString(num(g.y(s.Y[i])))
		pen = true
	}
	return d.String()
}

// num writes a coordinate to a hundredth of a point.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
