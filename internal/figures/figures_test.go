package figures

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"io"
	"math"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
)

// synthetic is a thrash-shaped run: quiet, a noisy plateau, quiet again.
func synthetic(n int, t0 float64) (x, user, system, in, out []float64) {
	for i := range n {
		t := t0 + float64(i)
		x = append(x, t)
		f := float64(i) / float64(n)
		level := math.Exp(-math.Pow((f-0.5)/0.15, 2))
		noise := math.Sin(float64(i)*2.3) * 0.3
		user = append(user, 5+10*(1-level))
		system = append(system, 5+40*level*(1+noise))
		in = append(in, 40000*level*(1+noise))
		out = append(out, 38000*level*(1-noise))
	}
	return
}

func TestRenderWritesValidImages(t *testing.T) {
	x, user, system, in, out := synthetic(61, 0)
	one := 1.0
	ratio := Chart{Title: "Working-set ratio", XLabel: "time (s)", YLabel: "ratio", RefLine: &one,
		Series: []Series{{Name: "ratio", X: x, Y: system}}}
	errs := Chart{Title: "fill", XLabel: "GiB", YLabel: "s",
		Series: []Series{{Name: "fill time", X: []float64{1, 2, 3}, Y: []float64{1, 2, 4}, YErr: []float64{0.1, 0.2, math.NaN()}}}}
	smoothed := PagingChart(x, in, out)
	smoothed.Smooth = true
	for _, f := range []Format{PNG, SVG} {
		var b bytes.Buffer
		if err := Render(&b, f, 900, 300, CPUChart(x, user, system), smoothed, ratio, errs, Chart{Title: "empty"}); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		checkImage(t, f, b.Bytes(), 1200, 400)
	}
	var b bytes.Buffer
	if err := RenderGrid(&b, PNG, 600, 600, []Chart{CPUChart(x, user, system)}, []Chart{smoothed, smoothed}); err != nil {
		t.Fatal(err)
	}
	checkImage(t, PNG, b.Bytes(), 800, 800)
}

func TestRenderRejectsBadInput(t *testing.T) {
	cases := map[string]struct {
		f      Format
		charts []Chart
		want   string
	}{
		"format":    {"gif", []Chart{{}}, `"gif"`},
		"no charts": {SVG, nil, "no charts"},
		"lengths":   {SVG, []Chart{{Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{1, 2}}}}}, `"s" has 1 x and 2 y`},
	}
	for name, c := range cases {
		err := Render(io.Discard, c.f, 100, 100, c.charts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to mention %s", name, err, c.want)
		}
	}
}

// checkImage decodes a PNG (and checks its pixel size at 96 dpi) or parses an SVG.
func checkImage(t *testing.T, f Format, b []byte, wantW, wantH int) {
	t.Helper()
	switch f {
	case PNG:
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("PNG does not decode: %v", err)
		}
		if r := img.Bounds(); r.Dx() != wantW || r.Dy() != wantH {
			t.Errorf("PNG is %dx%d, want %dx%d", r.Dx(), r.Dy(), wantW, wantH)
		}
	case SVG:
		dec := xml.NewDecoder(bytes.NewReader(b))
		root := ""
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("SVG is not XML: %v", err)
			}
			if se, ok := tok.(xml.StartElement); ok && root == "" {
				root = se.Name.Local
			}
		}
		if root != "svg" {
			t.Errorf("SVG root element %q", root)
		}
	}
}

// BenchmarkRenderSVG900 is the live page's cost: both paper panels of 900
// samples, smoothed, to SVG.
func BenchmarkRenderSVG900(b *testing.B) {
	x, user, system, in, out := synthetic(900, -899)
	cpu, paging := CPUChart(x, user, system), PagingChart(x, in, out)
	cpu.Smooth, paging.Smooth = true, true
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if err := Render(&buf, SVG, 12*vg.Inch, 4*vg.Inch, cpu, paging); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "svg-bytes")
}

func TestTicksAreRound(t *testing.T) {
	cases := []struct {
		lo, hi float64
		want   string
	}{
		{1, 60, "10 20 30 40 50 60"},
		{0, 100, "0 20 40 60 80 100"},
		{0, 54084 * 1.2, "0 10k 20k 30k 40k 50k 60k"},
		{-900, 0, "-800 -600 -400 -200 0"},
		{0, 0.5, "0 0.1 0.2 0.3 0.4 0.5"},
		{0, 3e6, "0 500k 1M 1.5M 2M 2.5M 3M"},
	}
	for _, c := range cases {
		var labels []string
		for _, tk := range (siTicks{}).Ticks(c.lo, c.hi) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if got := strings.Join(labels, " "); got != c.want {
			t.Errorf("[%g, %g]: ticks %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
}

// The live page renders for each client at once.
func TestRenderConcurrently(t *testing.T) {
	x, user, system, in, out := synthetic(300, -299)
	done := make(chan error)
	for range 4 {
		go func() {
			done <- Render(io.Discard, SVG, 600, 200, CPUChart(x, user, system), PagingChart(x, in, out))
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
