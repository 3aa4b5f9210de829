package api

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/thrashscope/thrashscope/internal/history"
	"github.com/thrashscope/thrashscope/internal/live"
)

func TestReadyzFollowsFirstSample(t *testing.T) {
	ready := false
	h := NewHandler(Options{Gatherer: prometheus.ToTransactionalGatherer(prometheus.NewRegistry()), Ready: func() error {
		if !ready {
			return errors.New("no sample taken yet")
		}
		return nil
	}})
	for _, tc := range []struct {
		ready    bool
		wantCode int
		wantBody string
	}{
		{false, http.StatusServiceUnavailable, `{"error":"no sample taken yet"}`},
		{true, http.StatusOK, `{"status":"ready"}`},
	} {
		ready = tc.ready
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != tc.wantCode || strings.TrimSpace(rec.Body.String()) != tc.wantBody {
			t.Errorf("ready=%v: %d %s, want %d %s", tc.ready, rec.Code, rec.Body, tc.wantCode, tc.wantBody)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q, want application/json", ct)
		}
	}
}

func TestMethodNotAllowedOnMetrics(t *testing.T) {
	h := NewHandler(Options{Gatherer: prometheus.ToTransactionalGatherer(prometheus.NewRegistry()), Ready: func() error { return nil }})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/metrics", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", rec.Code)
	}
}

// livePage is the real live page over an empty sample store.
func livePage() http.Handler {
	return live.New(live.Options{History: history.New(time.Second), TokenRequired: true})
}

// TestLivePageRoutes: the page is the root alone, GET only; its resources
// are under /live/; every other path keeps the API's JSON 404 and 405.
func TestLivePageRoutes(t *testing.T) {
	h := NewHandler(Options{Gatherer: prometheus.ToTransactionalGatherer(prometheus.NewRegistry()), Ready: func() error { return nil }, Page: livePage()})
	for _, tc := range []struct {
		method, target string
		wantCode       int
		wantType       string
		wantBody       string
		wantAllow      string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8", "Waiting for samples", ""},
		{"HEAD", "/", 200, "text/html; charset=utf-8", "", ""},
		{"GET", "/live/figures/cpu.svg", 200, "image/svg+xml", "waiting for samples", ""},
		{"GET", "/live/assets/page.js", 200, "text/javascript; charset=utf-8", "fetch(", ""},
		{"GET", "/index.html", 404, "application/json", `"no such endpoint: GET /index.html; see /metrics`, ""},
		{"GET", "/live/figures/nope.svg", 404, "application/json", `"no such figure: nope.svg`, ""},
		{"POST", "/", 405, "application/json", `"POST /: method not allowed; use GET"`, "GET, HEAD"},
		{"DELETE", "/live/status", 405, "application/json", "method not allowed", "GET, HEAD"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, nil))
		if rec.Code != tc.wantCode || rec.Header().Get("Content-Type") != tc.wantType || !strings.Contains(rec.Body.String(), tc.wantBody) {
			t.Errorf("%s %s: %d %q %.200s\nwant %d %q containing %q", tc.method, tc.target, rec.Code, rec.Header().Get("Content-Type"), rec.Body, tc.wantCode, tc.wantType, tc.wantBody)
		}
		if got := rec.Header().Get("Allow"); got != tc.wantAllow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.target, got, tc.wantAllow)
		}
	}

	// Without a page the root is unknown, like any other path.
	h = NewHandler(Options{Gatherer: prometheus.ToTransactionalGatherer(prometheus.NewRegistry()), Ready: func() error { return nil }})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "no such endpoint") {
		t.Errorf("GET / without a page: %d %s, want the JSON 404", rec.Code, rec.Body)
	}
}

// brokenCollector sends one good series and one that cannot be built.
type brokenCollector struct{ good, bad *prometheus.Desc }

func (c brokenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.good; ch <- c.bad }
func (c brokenCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.good, prometheus.GaugeValue, 1)
	ch <- prometheus.NewInvalidMetric(c.bad, errors.New("broken on purpose"))
}

// A collector's failure is served around, logged once (not per scrape) and
// counted in promhttp_metric_handler_errors_total.
func TestMetricsCollectErrorLoggedAndCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(brokenCollector{
		good: prometheus.NewDesc("good_total", "A series that works.", nil, nil),
		bad:  prometheus.NewDesc("bad_total", "A series that fails.", nil, nil),
	})
	var logs bytes.Buffer
	h := NewHandler(Options{Gatherer: prometheus.ToTransactionalGatherer(reg), Registerer: reg, Ready: func() error { return nil }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	var body string
	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /metrics: %d, want 200 with the good series", rec.Code)
		}
		body = rec.Body.String()
		if !strings.Contains(body, "good_total 1") {
			t.Fatalf("the good series is missing:\n%s", body)
		}
	}
	if !strings.Contains(body, `promhttp_metric_handler_errors_total{cause="gathering"} 2`) {
		t.Errorf("the third scrape should count the two before it as gathering errors:\n%s", body)
	}
	if n := strings.Count(logs.String(), "broken on purpose"); n != 1 {
		t.Errorf("the error was logged %d times over 3 scrapes, want once:\n%s", n, logs.String())
	}
}

// The DNS-rebinding guard: without a token, only localhost or a listen
// address in Host; a mutation from another origin is refused either way.
func TestRebindingAndCrossOriginGuard(t *testing.T) {
	for _, tc := range []struct {
		name     string
		token    string
		method   string
		host     string
		header   map[string]string
		wantCode int
	}{
		{name: "rebinding name", method: "GET", host: "rebind.attacker.example:9752", wantCode: http.StatusMisdirectedRequest},
		{name: "rebinding start", method: "POST", host: "rebind.attacker.example", header: map[string]string{"Origin": "http://rebind.attacker.example"}, wantCode: http.StatusMisdirectedRequest},
		{name: "loopback address", method: "GET", host: "127.0.0.1:9752", wantCode: http.StatusOK},
		{name: "another loopback address", method: "GET", host: "127.0.0.2:9752", wantCode: http.StatusOK},
		{name: "localhost", method: "GET", host: "localhost:9752", wantCode: http.StatusOK},
		{name: "other address", method: "GET", host: "10.1.2.3:9752", wantCode: http.StatusMisdirectedRequest},
		{name: "cross-site start", method: "POST", host: "127.0.0.1:9752", header: map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, wantCode: http.StatusForbidden},
		{name: "cross-origin abort", method: "DELETE", host: "127.0.0.1:9752", header: map[string]string{"Origin": "https://evil.example"}, wantCode: http.StatusForbidden},
		{name: "same-origin start", method: "POST", host: "127.0.0.1:9752", header: map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:9752"}, wantCode: http.StatusCreated},
		{name: "curl start", method: "POST", host: "127.0.0.1:9752", wantCode: http.StatusCreated},
		{name: "token: any name", token: "s3cret", method: "GET", host: "observer.internal:9752", wantCode: http.StatusOK},
		{name: "token: cross-site still refused", token: "s3cret", method: "POST", host: "observer.internal:9752", header: map[string]string{"Sec-Fetch-Site": "cross-site", "Authorization": "Bearer s3cret"}, wantCode: http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHandler(Options{Gatherer: prometheus.ToTransactionalGatherer(prometheus.NewRegistry()), Ready: func() error { return nil }, Runs: newFakeRuns(false),
				Token: tc.token, ListenHosts: []string{"127.0.0.1"}})
			target, body := "/api/v1/runs", ""
			switch tc.method {
			case "POST":
				body = `{"preset":"e4","scale":0.1,"backing":"file"}`
			case "DELETE":
				target = "/api/v1/runs/run-1"
			}
			req := httptest.NewRequest(tc.method, target, strings.NewReader(body))
			req.Host = tc.host
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode {
				t.Errorf("%s %s Host %s: %d %s, want %d", tc.method, target, tc.host, rec.Code, rec.Body, tc.wantCode)
			}
		})
	}
}

// TestMetricsCompressed: a scrape that accepts gzip gets gzip (the fastest
// level, which the observer pays on every host), whole and parseable; one
// that does not gets plain text.
func TestMetricsCompressed(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "thrashscope_test_gauge", Help: "A gauge."}, []string{"comm"})
	reg.MustRegister(g)
	for i := range 500 { // a scrape's size: 56 KB during a run
		g.WithLabelValues(fmt.Sprintf("consumer-%03d", i)).Set(float64(i))
	}
	h := NewHandler(Options{Gatherer: prometheus.ToTransactionalGatherer(reg), Ready: func() error { return nil }})

	scrape := func(encoding string) (*http.Response, []byte) {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if encoding != "" {
			req.Header.Set("Accept-Encoding", encoding)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Result(), rec.Body.Bytes()
	}
	resp, body := scrape("gzip")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("with Accept-Encoding gzip: %d, Content-Encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("Content-Type %q, want the text exposition format", resp.Header.Get("Content-Type"))
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(plain))
	if err != nil || len(families["thrashscope_test_gauge"].GetMetric()) != 500 {
		t.Fatalf("decompressed scrape: %v, %d samples; want 500", err, len(families["thrashscope_test_gauge"].GetMetric()))
	}
	if len(body) > len(plain)/3 {
		t.Errorf("gzip gave %d bytes of %d: barely compressed", len(body), len(plain))
	}

	if v := resp.Header.Values("Vary"); !slices.Contains(v, "Accept-Encoding") {
		t.Errorf("Vary %q: a cache must key the scrape on Accept-Encoding", v)
	}
	resp, body = scrape("gzip;q=0, identity")
	if enc := resp.Header.Get("Content-Encoding"); enc != "" || !bytes.Equal(body, plain) {
		t.Errorf("with gzip refused: Content-Encoding %q, %d bytes; want the same text plain (%d bytes)", enc, len(body), len(plain))
	}
	resp, body = scrape("")
	if enc := resp.Header.Get("Content-Encoding"); enc != "" || !bytes.Equal(body, plain) {
		t.Errorf("without Accept-Encoding: Content-Encoding %q, %d bytes; want the same text plain (%d bytes)", enc, len(body), len(plain))
	}
}

// TestAcceptsGzip: the scrape is gzipped for the Accept-Encoding values
// that take gzip, and plain for those that refuse it or name none.
func TestAcceptsGzip(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"gzip"}, true},                    // Prometheus
		{[]string{"gzip, deflate, br, zstd"}, true}, // curl --compressed
		{[]string{"deflate", "GZIP;q=0.5"}, true},   // two headers, any case
		{[]string{"x-gzip"}, true},                  // the old name
		{[]string{"*"}, true},                       // anything
		{[]string{"identity"}, false},               // plain only
		{[]string{"gzip;q=0"}, false},               // refused
		{[]string{"*, gzip; q=0.0"}, false},         // refused by name past *
		{[]string{"*;q=0"}, false},                  // nothing but identity
		{[]string{"br, zstd"}, false},               // none the observer sends
		{[]string{"gzip;q=nonsense"}, false},        // a q that does not parse
	} {
		if got := acceptsGzip(tc.values); got != tc.want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", tc.values, got, tc.want)
		}
	}
}

// A handler that takes Content-Encoding back to answer in plain text (as
// promhttp's errors do) is sent plain, and one that keeps it is gzipped,
// its error status and all.
func TestScrapeGzipPlainError(t *testing.T) {
	const msg = "An error has occurred while serving metrics"
	for _, tc := range []struct {
		name string
		drop bool
	}{{"encoding taken back", true}, {"encoding kept", false}} {
		h := scrapeGzip(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if tc.drop {
				w.Header().Del("Content-Encoding")
			}
			http.Error(w, msg, http.StatusInternalServerError)
		}), newScrapeWriters())
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body := rec.Body.Bytes()
		if tc.drop {
			if enc := rec.Header().Get("Content-Encoding"); enc != "" || rec.Code != 500 || strings.TrimSpace(string(body)) != msg {
				t.Errorf("%s: %d, Content-Encoding %q, body %q; want 500, none, the message plain", tc.name, rec.Code, enc, body)
			}
			continue
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil || rec.Code != 500 || rec.Header().Get("Content-Encoding") != "gzip" || strings.TrimSpace(string(plain)) != msg {
			t.Errorf("%s: %d, Content-Encoding %q, %q, %v; want 500, gzip, the message", tc.name, rec.Code, rec.Header().Get("Content-Encoding"), plain, err)
		}
	}
}

// The scrapes' compressors are kept from one scrape to the next, a GC
// between them or not: one is made for scrapes one at a time, and each
// scrape's output is whole.
func TestScrapeCompressorsKept(t *testing.T) {
	body := strings.Repeat("thrashscope_test_gauge{comm=\"consumer\"} 1\n", 2000)
	kept := newScrapeWriters()
	h := scrapeGzip(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, body)
	}), kept)
	for i := range 5 {
		runtime.GC() // twice: a sync.Pool keeps what it held for one GC
		runtime.GC()
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatalf("scrape %d: %v", i, err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil || string(plain) != body {
			t.Fatalf("scrape %d: %v, %d bytes of %d", i, err, len(plain), len(body))
		}
	}
	if n := kept.made.Load(); n != 1 {
		t.Errorf("%d compressors made for 5 scrapes one after another, want 1", n)
	}
}

// A scrape goes out in one piece, with its length (not chunked), its
// status and headers as its handler set them.
func TestWholeResponse(t *testing.T) {
	body := strings.Repeat("thrashscope_test_gauge{comm=\"consumer\"} 1\n", 2000) // 86 KB, past net/http's buffers
	h := wholeResponse(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if r.URL.Query().Has("fail") {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		for i := 0; i < len(body); i += 1000 {
			_, _ = io.WriteString(w, body[i:min(i+1000, len(body))])
		}
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct {
		query  string
		status int
	}{{"", 200}, {"?fail", 503}, {"", 200}} {
		resp, err := http.Get(srv.URL + "/metrics" + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(got) != body {
			t.Fatalf("%s: %v, %d bytes of %d", tc.query, err, len(got), len(body))
		}
		if resp.StatusCode != tc.status || resp.ContentLength != int64(len(body)) || len(resp.TransferEncoding) > 0 || resp.Header.Get("Content-Type") != "text/plain" {
			t.Errorf("%s: status %d, length %d, transfer encoding %v, type %q; want %d, %d, none, text/plain", tc.query, resp.StatusCode, resp.ContentLength, resp.TransferEncoding, resp.Header.Get("Content-Type"), tc.status, len(body))
		}
	}
}
