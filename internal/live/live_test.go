package live

import (
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
	"github.com/thrashscope/thrashscope/internal/history"
	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/row"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/workload"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// thrash feeds a store n samples of an e4-like episode: quiet, then swap
// traffic, stall and the detector's rise, then quiet again.
func thrash(t testing.TB, s *history.Store, n int) {
	t.Helper()
	var prev *pipeline.Tick
	for i := range n {
		phase := math.Sin(math.Pi * float64(i) / float64(n)) // 0 → 1 → 0
		cur := &sampler.Reading{Time: t0.Add(time.Duration(i) * time.Second), HasRates: true, Pressure: &procfs.Pressure{}}
		v := &indicators.Verdict{HasWorkingSetRatio: true, WorkingSetRatio: 0.5 + 2*phase, Processes: map[int]indicators.ProcessVerdict{}}
		cur.Rates = sampler.Rates{
			Host: row.Host{CPUUserPercent: 40 - 30*phase, CPUSystemPercent: 5 + 40*phase, SwapInPagesPerSecond: 46000 * phase, SwapOutPagesPerSecond: 45000 * phase, PressureSomePercent: 84 * phase, PressureFullPercent: 61 * phase},
		}
		switch {
		case phase > 0.8:
			v.State, v.HighFaultCount = 2, 25
		case phase > 0.5:
			v.State, v.HighFaultCount = 1, 12
		}
		for c := range 3 {
			p := sampler.Process{MajorFaults: readout.FaultCounts{readout.Anon: uint64(i * 1000 * (c + 1)), readout.File: uint64(i)}, Stall: readout.StallTime{OffCPU: time.Duration(i) * 300 * time.Millisecond}, HasStall: true}
			p.PID, p.StartTicks, p.Comm = 1000+c, 1, "consumer-0"+string(rune('0'+c))
			v.Processes[p.PID] = indicators.ProcessVerdict{HighFault: c == 0, WorkingSetBytes: 9 << 20, HasWorkingSet: true}
			p.ResidentBytes, p.SwapBytes = 7<<20, 3<<20
			cur.Processes = append(cur.Processes, p)
		}
		if prev != nil {
			rates := cur.Rates
			sampler.Complete(prev.Reading, cur) // the processes' rates, as the sampler does
			cur.Rates = rates
		}
		tick := &pipeline.Tick{Reading: cur, Verdict: v, Workloads: []workload.Workload{
			{Labels: workload.Parse("/system.slice/db.service"), HasRates: true, MajorFaultsPerSecond: 4200 * phase, StallPercent: 80 * phase,
				HasPSIRates: true, PSIFullPercent: 60 * phase, State: v.State, HasKernel: true,
				Kernel: workload.Kernel{CurrentBytes: 96 << 20, LimitBytes: 100 << 20}},
			{Labels: workload.Parse("/kubepods/burstable/pod3e1d7a2b-54c8-4f0e-9b1a-0c2d3e4f5a6b/" + strings.Repeat("ab", 32)), HasRates: true, MajorFaultsPerSecond: 12},
		}}
		s.Observe(prev, tick)
		prev = tick
	}
}

func newHandler(t testing.TB, points int, opts Options) (*Handler, *history.Store) {
	t.Helper()
	s := history.New(time.Second)
	thrash(t, s, points)
	opts.History = s
	return New(opts), s
}

func get(t testing.TB, h http.Handler, method, target string, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func activeRun() (RunStatus, bool) {
	return RunStatus{ID: "20260102-030405-abcdef", Preset: "e4", State: "running", Active: true,
		ConsumersActive: 12, ConsumersPlanned: 12, Consumers: 25, Elapsed: 22 * time.Second, Duration: time.Minute,
		DemandBytes: 120 << 20, LimitBytes: 100 << 20, Policy: "policy binpack: 8 frozen, 0 protected, bin 2 of 3 running",
		SwapDevice: "hdd-2013 (120 read I/Os, 120 write I/Os a second); reads throttled on 254:0 (blkio); swap-outs not throttled on cgroup v1"}, true
}

func TestPageRenders(t *testing.T) {
	h, _ := newHandler(t, 120, Options{Run: activeRun, TokenRequired: true})
	rec := get(t, h, "GET", "/")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	checkHeaders(t, rec)
	body := rec.Body.String()
	for _, want := range []string{
		`<script src="/live/assets/page.js" defer></script>`,
		`src="/live/figures/cpu.svg?v=120"`, `src="/live/figures/paging.svg?v=120"`,
		`src="/live/figures/pressure.svg?v=120"`, `src="/live/figures/detector.svg?v=120"`,
		`data-refresh-ms="2000"`,
		`<td>consumer-02</td><td>3000</td>`, // busiest first: 3000 anon faults/s
		`<tr class="high"><td>1000</td><td>consumer-00</td><td>1000</td>`,
		`id="run-id">20260102-030405-abcdef</span>`, `<button type="button" id="abort" data-run="20260102-030405-abcdef">`,
		`22s of 1m0s; consumers 12 holding memory, 12 planned now, 25 in all; demand 120.0 MiB in a 100.0 MiB limit`,
		`<progress max="60000" value="22000">`,
		`<p id="run-policy">policy binpack: 8 frozen, 0 protected, bin 2 of 3 running</p>`,
		`<p id="run-device">swap device hdd-2013 (120 read I/Os, 120 write I/Os a second); reads throttled on 254:0 (blkio); swap-outs not throttled on cgroup v1</p>`,
		`id="token" type="password"`, `id="run-form"`,
		`<section id="workloads">`, `<td>/system.slice/db.service</td><td>db.service</td><td>normal</td>`,
		`<td>pod 3e1d7a2b-54c8-4f0e-9b1a-0c2d3e4f5a6b abababababab</td>`, `<td>96.0 MiB</td><td>100.0 MiB</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	// The inline-free page is what lets the CSP forbid inline script and style.
	for _, banned := range []string{"<script>", " style=", " onclick=", "http://", "https://"} {
		if strings.Contains(body, banned) {
			t.Errorf("the page has %q: it would break the CSP or load from elsewhere", banned)
		}
	}

	// The fragment the script refreshes holds the same live parts.
	rec = get(t, h, "GET", "/live/status")
	checkHeaders(t, rec)
	frag := rec.Body.String()
	for _, want := range []string{`<section id="summary" data-generation="120">`, `<div id="run">`, `<section id="top">`, "consumer-00", `<section id="workloads">`} {
		if !strings.Contains(frag, want) {
			t.Errorf("the status fragment lacks %s", want)
		}
	}
	if strings.Contains(frag, "<html") || strings.Contains(frag, "run-form") {
		t.Error("the status fragment carries the whole page or the form; refreshing would clobber what the user typed")
	}
}

func checkHeaders(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("X-Content-Type-Options %q, want nosniff", rec.Header().Get("X-Content-Type-Options"))
	}
}

func TestPageStates(t *testing.T) {
	t.Run("waiting", func(t *testing.T) {
		h, _ := newHandler(t, 0, Options{})
		for _, path := range []string{"/", "/live/status"} {
			rec := get(t, h, "GET", path)
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "Waiting for samples") {
				t.Errorf("GET %s with no samples: %d\n%s", path, rec.Code, rec.Body)
			}
		}
		for _, n := range FigureNames {
			rec := get(t, h, "GET", "/live/figures/"+n+".svg")
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "image/svg+xml" || !strings.Contains(rec.Body.String(), "waiting for samples") {
				t.Errorf("%s with no samples: %d %s", n, rec.Code, rec.Body)
			}
			wellFormed(t, rec.Body.String())
		}
	})
	t.Run("short interval", func(t *testing.T) {
		// 3600 points at 100 ms reach 6 minutes, and the page says so.
		h := New(Options{History: history.New(100 * time.Millisecond), Interval: 100 * time.Millisecond})
		if body := get(t, h, "GET", "/").Body.String(); !strings.Contains(body, "The last 6 minutes, one point per sample (every 100ms)") {
			t.Error("the page does not say how far back the figures reach at 100 ms")
		}
		if body := get(t, New(Options{History: history.New(time.Second)}), "GET", "/").Body.String(); !strings.Contains(body, "The last 15 minutes") {
			t.Error("the page does not say the figures reach 15 minutes at 1 s")
		}
	})
	t.Run("runs disabled", func(t *testing.T) {
		h, _ := newHandler(t, 10, Options{})
		body := get(t, h, "GET", "/").Body.String()
		if strings.Contains(body, "run-form") || !strings.Contains(body, "Runs are not enabled") {
			t.Errorf("runs disabled: the page offers the form or does not say why")
		}
		if strings.Contains(body, `id="token"`) {
			t.Error("a token field without a token")
		}
	})
	t.Run("no token", func(t *testing.T) {
		h, _ := newHandler(t, 10, Options{Run: func() (RunStatus, bool) { return RunStatus{}, false }})
		body := get(t, h, "GET", "/").Body.String()
		if !strings.Contains(body, "run-form") || strings.Contains(body, `id="token"`) || !strings.Contains(body, "No run yet.") {
			t.Errorf("an observer without a token, before any run:\n%s", body)
		}
	})
	t.Run("ended run", func(t *testing.T) {
		h, _ := newHandler(t, 10, Options{Run: func() (RunStatus, bool) {
			rs, _ := activeRun()
			rs.State, rs.Active = "aborted", false
			return rs, true
		}})
		body := get(t, h, "GET", "/").Body.String()
		if !strings.Contains(body, `class="run-aborted">aborted</span>`) || strings.Contains(body, `id="abort"`) || strings.Contains(body, "<progress") {
			t.Errorf("an ended run shows progress or an abort button")
		}
	})
	t.Run("diagnoses", func(t *testing.T) {
		d := diagnosis.Diagnosis{Summary: "app.service anon-swap-in thrash: needs ~384 MiB more than its limit of 256 MiB <b>", Opened: t0,
			Remedies: []diagnosis.Remedy{{Action: diagnosis.ActionRaiseLimit, Target: "/app", Effect: "holds the working set", Confidence: diagnosis.High}},
			Useless:  []diagnosis.Useless{{Action: diagnosis.ActionFasterDevice, Why: "the device is idle"}}}
		open := []diagnosis.Diagnosis{d}
		h, _ := newHandler(t, 10, Options{Diagnoses: func() []diagnosis.Diagnosis { return open }})
		body := get(t, h, "GET", "/live/status").Body.String()
		for _, want := range []string{"Why it thrashes", "needs ~384 MiB more than its limit of 256 MiB &lt;b&gt;", "<strong>raise-limit</strong> /app: holds the working set (high confidence)", "Would not help: faster-device, the device is idle."} {
			if !strings.Contains(body, want) {
				t.Errorf("the status does not show %q:\n%s", want, body)
			}
		}
		open = nil
		if body := get(t, h, "GET", "/live/status").Body.String(); !strings.Contains(body, "Nothing thrashes now.") {
			t.Error("no diagnosis open, and the page does not say nothing thrashes")
		}
		h, _ = newHandler(t, 10, Options{})
		if body := get(t, h, "GET", "/live/status").Body.String(); strings.Contains(body, "Why it thrashes") {
			t.Error("an observer that makes no diagnoses shows their section")
		}
	})
	t.Run("escaping", func(t *testing.T) {
		s := history.New(time.Second)
		p := sampler.Process{}
		p.PID, p.Comm = 66, "<img src=x>"
		s.Observe(nil, &pipeline.Tick{Reading: &sampler.Reading{Time: t0, HasRates: true, Processes: []sampler.Process{p}}})
		body := get(t, New(Options{History: s}), "GET", "/").Body.String()
		if strings.Contains(body, "<img src=x>") || !strings.Contains(body, "&lt;img src=x&gt;") {
			t.Error("a process name is not escaped")
		}
		if !strings.Contains(body, `<p class="state state-off" id="state">off</p>`) {
			t.Error("a sample without the detector does not show it off")
		}
	})
}

// drawing is what an SVG figure draws: its paths, its curves (the paths
// clipped to the data area, the reference line not counted) and its text.
type drawing struct{ paths, curves, texts int }

// wellFormed parses an SVG as XML and counts what it draws.
func wellFormed(t *testing.T, svg string) drawing {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var got drawing
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root == "" {
			root = se.Name.Local
		}
		switch se.Name.Local {
		case "path":
			got.paths++
			clipped, dashed := false, false
			for _, a := range se.Attr {
				clipped = clipped || a.Name.Local == "clip-path"
				dashed = dashed || a.Name.Local == "stroke-dasharray"
			}
			if clipped && !dashed {
				got.curves++
			}
		case "text":
			got.texts++
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	return got
}

func TestFigures(t *testing.T) {
	h, s := newHandler(t, 300, Options{})
	for _, n := range FigureNames {
		rec := get(t, h, "GET", "/live/figures/"+n+".svg")
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "image/svg+xml" {
			t.Fatalf("%s: %d %q %s", n, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
		checkHeaders(t, rec)
		// Axes, grid and ticks (three paths), two curves with their
		// legend's swatches, and the title, axis labels and tick labels.
		if d := wellFormed(t, rec.Body.String()); d.curves != 2 || d.paths < 3+2*d.curves || d.texts < 8 {
			t.Errorf("%s draws %+v, want 2 curves, their swatches, axes, grid and ticks, and 8 texts or more", n, d)
		}
		if etag := rec.Header().Get("ETag"); etag != `"300"` {
			t.Errorf("%s: ETag %q, want the store generation", n, etag)
		}
		// A figure is the same whatever the query: the page's ?v= only
		// busts the browser's cache, and nothing asks for a bigger one.
		again := get(t, h, "GET", "/live/figures/"+n+".svg?v=1&width=100000&points=1000000")
		if again.Body.String() != rec.Body.String() {
			t.Errorf("%s: a query changed the figure", n)
		}
		if nm := get(t, h, "GET", "/live/figures/"+n+".svg", "If-None-Match", `"300"`); nm.Code != http.StatusNotModified || nm.Body.Len() != 0 {
			t.Errorf("%s revalidated: %d with %d bytes, want 304 and none", n, nm.Code, nm.Body.Len())
		}
	}
	if got := h.figs.renders.Load(); got != int64(len(FigureNames)) {
		t.Errorf("%d renders for %d figures asked 3 times each, want one each", got, len(FigureNames))
	}

	// Many viewers of a new sample cost one render per figure. They stay
	// within maxInFlight: past it the handler answers 503 by design.
	s.Add(history.Point{UnixMilli: t0.Add(time.Hour).UnixMilli()})
	var wg sync.WaitGroup
	viewers := maxInFlight / len(FigureNames)
	for range viewers {
		for _, n := range FigureNames {
			wg.Go(func() {
				if rec := get(t, h, "GET", "/live/figures/"+n+".svg"); rec.Code != http.StatusOK || rec.Header().Get("ETag") != `"301"` {
					t.Errorf("%s after a new sample: %d ETag %s", n, rec.Code, rec.Header().Get("ETag"))
				}
			})
		}
	}
	wg.Wait()
	if got := h.figs.renders.Load(); got != 2*int64(len(FigureNames)) {
		t.Errorf("%d renders after one new sample and %d requests, want %d", got, viewers*len(FigureNames), 2*len(FigureNames))
	}
}

func TestNotFoundAndMethods(t *testing.T) {
	h, _ := newHandler(t, 10, Options{})
	for _, tc := range []struct {
		method, target string
		code           int
		says           string
	}{
		{"GET", "/live/figures/nope.svg", 404, "no such figure: nope.svg; there are [cpu.svg paging.svg pressure.svg detector.svg]"},
		{"GET", "/live/figures/cpu", 404, "no such figure: cpu;"},
		{"GET", "/live/figures/cpu.png", 404, "no such figure"},
		{"GET", "/live/assets/secret.txt", 404, "no such page asset: secret.txt"},
		{"GET", "/live/assets/page.html", 404, "no such page asset"},
		{"GET", "/live/nothing", 404, "no such page resource: /live/nothing"},
		{"GET", "/index.html", 404, "no such page resource"},
		{"POST", "/", 405, "POST /: method not allowed; the page is read-only, use GET"},
		{"PUT", "/live/figures/cpu.svg", 405, "PUT /live/figures/cpu.svg: method not allowed"},
		{"DELETE", "/live/status", 405, "DELETE /live/status: method not allowed"},
	} {
		rec := get(t, h, tc.method, tc.target)
		var e struct{ Error string }
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != tc.code || !strings.HasPrefix(e.Error, tc.says) {
			t.Errorf("%s %s: %d %s, want %d starting %q", tc.method, tc.target, rec.Code, rec.Body, tc.code, tc.says)
		}
		if tc.code == 405 && rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s %s: Allow %q", tc.method, tc.target, rec.Header().Get("Allow"))
		}
		checkHeaders(t, rec)
	}
	for _, asset := range []struct{ file, ct, has string }{
		{"page.js", "text/javascript; charset=utf-8", "sessionStorage"},
		{"page.css", "text/css; charset=utf-8", ".state-thrashing"},
	} {
		rec := get(t, h, "GET", "/live/assets/"+asset.file)
		if rec.Code != 200 || rec.Header().Get("Content-Type") != asset.ct || !strings.Contains(rec.Body.String(), asset.has) {
			t.Errorf("%s: %d %q", asset.file, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
	if rec := get(t, h, "HEAD", "/"); rec.Code != http.StatusOK {
		t.Errorf("HEAD /: %d", rec.Code)
	}
}

func TestInFlightBound(t *testing.T) {
	h, _ := newHandler(t, 10, Options{})
	for range maxInFlight {
		h.inFlight <- struct{}{}
	}
	for _, path := range []string{"/live/figures/cpu.svg", "/live/status"} {
		if rec := get(t, h, "GET", path); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
			t.Errorf("GET %s past the in-flight bound: %d, want 503 with Retry-After", path, rec.Code)
		}
	}
	<-h.inFlight
	if rec := get(t, h, "GET", "/live/figures/cpu.svg"); rec.Code != http.StatusOK {
		t.Errorf("with a slot free: %d", rec.Code)
	}
}

func TestThinKeepsPeaks(t *testing.T) {
	var pts []history.Point
	for i := range 3600 {
		p := history.Point{UnixMilli: int64(i) * 250, State: 0, WorkingSetRatio: float32(math.NaN())}
		p.SetHost(row.Host{SwapInPagesPerSecond: 1})
		if i == 1234 {
			p.SetHost(row.Host{SwapInPagesPerSecond: 50000})
			p.State, p.WorkingSetRatio = 2, 3
		}
		pts = append(pts, p)
	}
	out := thin(pts, maxPlotPoints)
	if len(out) != maxPlotPoints || out[len(out)-1].UnixMilli != pts[len(pts)-1].UnixMilli {
		t.Fatalf("thinned to %d points ending at %d", len(out), out[len(out)-1].UnixMilli)
	}
	var peak history.Point
	for _, p := range out {
		if p.Host().SwapInPagesPerSecond > peak.Host().SwapInPagesPerSecond {
			peak = p
		}
	}
	if peak.Host().SwapInPagesPerSecond != 50000 || peak.State != 2 || peak.WorkingSetRatio != 3 {
		t.Errorf("the one-sample burst was lost: peak %+v", peak)
	}
	if short := thin(pts[:10], maxPlotPoints); len(short) != 10 {
		t.Errorf("thin changed a short series: %d points", len(short))
	}
}

// BenchmarkRenderFigures is what one sample costs the observer once anyone
// is watching: the four figures over 15 minutes at 1 s, rendered once.
func BenchmarkRenderFigures(b *testing.B) {
	h, s := newHandler(b, 900, Options{})
	last := s.Window(0)[s.Len()-1]
	var bytes int
	for b.Loop() {
		last.UnixMilli += 1000 // a new sample, so a new generation
		s.Add(last)
		bytes = 0
		for _, n := range FigureNames {
			bytes += get(b, h, "GET", "/live/figures/"+n+".svg").Body.Len()
		}
	}
	b.ReportMetric(float64(bytes), "svg-bytes")
}
