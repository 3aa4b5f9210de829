package chart

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// element is one element of a drawn SVG with its attributes.
type element struct {
	name  string
	attrs map[string]string
	text  string
}

func parse(t *testing.T, svg []byte) []element {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	var out []element
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			e := element{name: tk.Name.Local, attrs: map[string]string{}}
			for _, a := range tk.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
		case xml.CharData:
			if len(out) > 0 {
				out[len(out)-1].text += string(tk)
			}
		}
	}
}

func draw(t *testing.T, c Chart) []element {
	t.Helper()
	var b bytes.Buffer
	if err := WriteSVG(&b, 468, 216, c); err != nil {
		t.Fatal(err)
	}
	es := parse(t, b.Bytes())
	if len(es) == 0 || es[0].name != "svg" || es[0].attrs["viewBox"] != "0 0 468 216" {
		t.Fatalf("root: %+v", es)
	}
	return es
}

// curves are the clipped, undashed paths: one per series drawn.
func curves(es []element) []element {
	var out []element
	for _, e := range es {
		if e.name == "path" && e.attrs["clip-path"] != "" && e.attrs["stroke-dasharray"] == "" {
			out = append(out, e)
		}
	}
	return out
}

// points reads a path's "M x y L x y ..." back as its runs of points, a
// run per M.
func points(t *testing.T, d string) [][][2]float64 {
	t.Helper()
	var runs [][][2]float64
	for _, m := range pathOp.FindAllStringSubmatch(d, -1) {
		x, err1 := strconv.ParseFloat(m[2], 64)
		y, err2 := strconv.ParseFloat(m[3], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%q of %q: %v %v", m[0], d, err1, err2)
		}
		if m[1] == "M" || len(runs) == 0 {
			runs = append(runs, nil)
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], [2]float64{x, y})
	}
	return runs
}

var pathOp = regexp.MustCompile(`([ML])(-?[0-9.]+) (-?[0-9.]+)`)

func texts(es []element) []string {
	var out []string
	for _, e := range es {
		if e.name == "text" {
			out = append(out, e.text)
		}
	}
	return out
}

func TestCurvesFollowTheData(t *testing.T) {
	lo, hi := 0.0, 100.0
	c := Chart{Title: "CPU <usage> & more", XLabel: "time (s)", YLabel: "%",
		Series: []Series{
			{Name: "user", X: []float64{0, 5, 10}, Y: []float64{0, 50, 100}},
			{Name: "system", X: []float64{0, 5, 10}, Y: []float64{10, math.NaN(), 30}},
		},
		YMin: &lo, YMax: &hi}
	es := draw(t, c)
	cs := curves(es)
	if len(cs) != 2 {
		t.Fatalf("%d curves, want 2", len(cs))
	}
	if cs[0].attrs["stroke"] != "#1f77b4" || cs[1].attrs["stroke"] != "#d62728" {
		t.Errorf("strokes %s %s, want the palette's first two", cs[0].attrs["stroke"], cs[1].attrs["stroke"])
	}
	user := points(t, cs[0].attrs["d"])
	if len(user) != 1 || len(user[0]) != 3 {
		t.Fatalf("user: %v, want one run of 3 points", user)
	}
	// Evenly spaced data are evenly spaced points; y grows upwards, and
	// 0..100 spans the data area exactly, so 50 sits halfway.
	p0, p1, p2 := user[0][0], user[0][1], user[0][2]
	if math.Abs((p1[0]-p0[0])-(p2[0]-p1[0])) > 0.02 || !(p2[0] > p0[0]) {
		t.Errorf("x not linear: %v", user[0])
	}
	if !(p2[1] < p0[1]) || math.Abs(p1[1]-(p0[1]+p2[1])/2) > 0.02 {
		t.Errorf("y not linear upwards: %v", user[0])
	}
	// The data area is the clip rectangle: 100 % is its top, 0 its bottom.
	var clip element
	for _, e := range es {
		if e.name == "rect" && e.attrs["x"] != "" {
			clip = e
		}
	}
	top, _ := strconv.ParseFloat(clip.attrs["y"], 64)
	h, _ := strconv.ParseFloat(clip.attrs["height"], 64)
	if math.Abs(p2[1]-top) > 0.02 || math.Abs(p0[1]-(top+h)) > 0.02 {
		t.Errorf("0 and 100 at y %g and %g, want the data area's bottom %g and top %g", p0[1], p2[1], top+h, top)
	}
	// A NaN is a gap: the curve is two runs of one point each.
	if sys := points(t, cs[1].attrs["d"]); len(sys) != 2 {
		t.Errorf("system: %v, want two runs around the NaN", sys)
	}
	got := strings.Join(texts(es), "|")
	for _, want := range []string{"CPU <usage> & more", "time (s)", "|%", "user", "system", "|0|", "|100|", "|40|", "|10|"} {
		if !strings.Contains("|"+got+"|", want) {
			t.Errorf("texts %q lack %q", got, want)
		}
	}
}

func TestLegendHeadroomAndReferenceLine(t *testing.T) {
	one := 1.0
	c := Chart{Series: []Series{{Name: "ratio", X: []float64{0, 1}, Y: []float64{0, 0.5}}}, RefLine: &one}
	es := draw(t, c)
	var ref []element
	for _, e := range es {
		if e.name == "path" && e.attrs["stroke-dasharray"] != "" {
			ref = append(ref, e)
		}
	}
	if len(ref) != 1 {
		t.Fatalf("%d dashed lines, want the reference line", len(ref))
	}
	curve := points(t, curves(es)[0].attrs["d"])[0]
	refY := points(t, ref[0].attrs["d"])[0][0][1]
	// 0.5 sits halfway between 0 and the line at 1, which the range takes
	// in; the legend's headroom puts the line below the top.
	if mid := (curve[0][1] + refY) / 2; math.Abs(curve[1][1]-mid) > 0.02 {
		t.Errorf("0.5 at y %g, want halfway (%g) between 0 (%g) and 1 (%g)", curve[1][1], mid, curve[0][1], refY)
	}
}

func TestEmptyAndBadCharts(t *testing.T) {
	// No finite point: axes over 0..1 and no curve, never an error.
	es := draw(t, Chart{Title: "empty", Series: []Series{{Name: "x", X: []float64{1}, Y: []float64{math.Inf(1)}}}})
	if n := len(curves(es)); n != 0 {
		t.Errorf("%d curves of no finite point", n)
	}
	if got := strings.Join(texts(es), "|"); !strings.Contains(got, "empty") || strings.Contains(got, "|x|") {
		t.Errorf("texts %q: want the title and no legend entry", got)
	}
	for _, c := range []struct {
		w, h float64
		ch   Chart
		want string
	}{
		{468, 216, Chart{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1}}}}, `series "a" has 2 x and 1 y values`},
		{0, 216, Chart{}, "want both above zero"},
		{468, math.NaN(), Chart{}, "want both above zero"},
		{20, 20, Chart{}, "too small"},
	} {
		if err := WriteSVG(io.Discard, c.w, c.h, c.ch); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%gx%g: %v, want %q", c.w, c.h, err, c.want)
		}
	}
}

func TestTicksAreRound(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		labels string
	}{
		{0, 100, "0 20 40 60 80 100"},
		{0, 52300, "0 10k 20k 30k 40k 50k"},
		{-900, 0, "-800 -600 -400 -200 0"},
		{0, 3, "0 0.5 1 1.5 2 2.5 3"},
	} {
		var labels []string
		for _, tk := range Ticks(c.lo, c.hi) {
			if tk.Value < c.lo || tk.Value > c.hi {
				t.Errorf("[%g, %g]: tick %g outside", c.lo, c.hi, tk.Value)
			}
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if got := strings.Join(labels, " "); got != c.labels {
			t.Errorf("[%g, %g]: labels %q, want %q", c.lo, c.hi, got, c.labels)
		}
	}
	if Ticks(1, 1) != nil || Ticks(0, math.Inf(1)) != nil {
		t.Error("an empty or infinite range has ticks")
	}
}
