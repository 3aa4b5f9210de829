package live

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/thrashscope/thrashscope/internal/chart"
	"github.com/thrashscope/thrashscope/internal/history"
)

// FigureNames are the page's figures, served as /live/figures/<name>.svg.
var FigureNames = []string{"cpu", "paging", "pressure", "detector"}

// Every figure has this one size: no request can ask for another.
const figureWidth, figureHeight = 6.5 * 72.0, 3 * 72.0 // points: 6.5 × 3 inches

// maxPlotPoints bounds a curve's points: at the default 1 s interval the
// 15 minutes fit whole; at shorter intervals each drawn point is the peak
// of its bucket, so a burst shorter than a pixel still shows.
const maxPlotPoints = 900

// figure is one cached rendering, valid for one store generation.
type figure struct {
	mu  sync.Mutex // one render per figure at a time; others wait for it
	gen uint64
	svg []byte
}

// figureCache renders each figure at most once per sample, whatever the
// number of viewers.
type figureCache struct {
	store   *history.Store
	figs    map[string]*figure
	render  chan struct{} // renders at once across figures
	renders atomic.Int64  // for the tests: renders done
}

func newFigureCache(s *history.Store) *figureCache {
	c := &figureCache{store: s, figs: map[string]*figure{}, render: make(chan struct{}, 1)}
	for _, n := range FigureNames {
		c.figs[n] = &figure{}
	}
	return c
}

func (h *Handler) figure(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutSuffix(r.PathValue("name"), ".svg")
	f := h.figs.figs[name]
	if !ok || f == nil {
		writeError(w, http.StatusNotFound, "no such figure: "+r.PathValue("name")+"; there are "+figureList())
		return
	}
	svg, gen, err := h.figs.get(r, name, f)
	if err != nil {
		if r.Context().Err() != nil {
			return // the viewer left
		}
		h.opts.Logger.Error("rendering a live figure", "figure", name, "err", err)
		writeError(w, http.StatusInternalServerError, "internal error: rendering "+name+".svg: "+err.Error())
		return
	}
	etag := `"` + strconv.FormatUint(gen, 10) + `"`
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Type", "image/svg+xml")
	// Opened on its own, an SVG is a document: it may style itself, nothing more.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; sandbox")
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(svg)))
	_, _ = w.Write(svg)
}

func figureList() string {
	var names []string
	for _, n := range FigureNames {
		names = append(names, n+".svg")
	}
	return fmt.Sprint(names)
}

// get returns the figure for the store's current generation, rendering it
// if no one has yet.
func (c *figureCache) get(r *http.Request, name string, f *figure) ([]byte, uint64, error) {
	gen := c.store.Generation()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.svg != nil && f.gen == gen {
		return f.svg, gen, nil
	}
	select {
	case c.render <- struct{}{}:
		defer func() { <-c.render }()
	case <-r.Context().Done():
		return nil, 0, r.Context().Err()
	}
	pts := c.store.Window(history.Span)
	var buf bytes.Buffer
	if len(pts) < 2 {
		buf.WriteString(placeholder(name, "waiting for samples"))
	} else if err := chart.WriteSVG(&buf, figureWidth, figureHeight, chartOf(name, pts)); err != nil {
		return nil, 0, err
	}
	c.renders.Add(1)
	f.svg, f.gen = buf.Bytes(), gen
	return f.svg, gen, nil
}

// chartOf builds a figure from the points, x in seconds before the newest.
func chartOf(name string, pts []history.Point) chart.Chart {
	pts = thin(pts, maxPlotPoints)
	newest := pts[len(pts)-1].UnixMilli
	x := make([]float64, len(pts))
	for i, p := range pts {
		x[i] = float64(p.UnixMilli-newest) / 1000
	}
	col := func(f func(history.Point) float64) []float64 {
		out := make([]float64, len(pts))
		for i, p := range pts {
			out[i] = f(p)
		}
		return out
	}
	var c chart.Chart
	switch name {
	case "cpu":
		c = chart.CPUChart(x, col(func(p history.Point) float64 { return p.Host().CPUUserPercent }), col(func(p history.Point) float64 { return p.Host().CPUSystemPercent }))
	case "paging":
		c = chart.PagingChart(x, col(func(p history.Point) float64 { return p.Host().SwapInPagesPerSecond }), col(func(p history.Point) float64 { return p.Host().SwapOutPagesPerSecond }))
	case "pressure":
		lo, hi := 0.0, 100.0
		c = chart.Chart{
			Title: "Memory pressure (PSI)", YLabel: "% of time stalled",
			Series: []chart.Series{
				{Name: "some", X: x, Y: col(func(p history.Point) float64 { return p.Host().PressureSomePercent })},
				{Name: "full", X: x, Y: col(func(p history.Point) float64 { return p.Host().PressureFullPercent })},
			},
			YMin: &lo, YMax: &hi,
		}
	case "detector":
		// A state of -1 (detector off) and a NaN ratio are gaps in
		// the curves.
		state := col(func(p history.Point) float64 {
			if p.State < 0 {
				return nan
			}
			return float64(p.State)
		})
		ratio := col(func(p history.Point) float64 { return float64(p.WorkingSetRatio) })
		// Headroom above the thrashing state keeps the legend off its line.
		lo, hi, one := 0.0, 3.0, 1.0
		for _, r := range ratio {
			if r == r {
				hi = max(hi, 1.15*r)
			}
		}
		c = chart.Chart{
			Title: "Thrash detector: 0 normal, 1 monitoring, 2 thrashing", YLabel: "state; working-set ratio",
			Series: []chart.Series{
				{Name: "state", X: x, Y: state},
				{Name: "working-set ratio", X: x, Y: ratio},
			},
			RefLine: &one, YMin: &lo, YMax: &hi,
		}
	}
	c.XLabel = "seconds before the latest sample"
	return c
}

// thin keeps at most n points: each bucket of consecutive points becomes
// its last point's time with every field's peak over the bucket.
func thin(pts []history.Point, n int) []history.Point {
	if len(pts) <= n {
		return pts
	}
	out := make([]history.Point, 0, n)
	for i := range n {
		lo, hi := i*len(pts)/n, (i+1)*len(pts)/n
		p := pts[hi-1]
		for _, q := range pts[lo : hi-1] {
			p.Peak(q)
		}
		out = append(out, p)
	}
	return slices.Clip(out)
}

// placeholder is a figure-sized SVG with a message, for before there is
// anything to draw.
func placeholder(name, msg string) string {
	var title, text bytes.Buffer
	_ = xml.EscapeText(&title, []byte(name))
	_ = xml.EscapeText(&text, []byte(msg))
	w, h := figureWidth, figureHeight
	return fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" width="%gpt" height="%gpt" viewBox="0 0 %g %g">`+
		`<title>%s</title><rect width="100%%" height="100%%" fill="#fff"/>`+
		`<text x="50%%" y="50%%" text-anchor="middle" font-family="sans-serif" font-size="14" fill="#666">%s</text></svg>`,
		w, h, w, h, title.String(), text.String())
}
