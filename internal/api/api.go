// Package api is the observer's HTTP surface: /metrics, the health
// endpoints and the run API. It is the last stage of the data flow, serving
// what the sampler, the metrics and the run engine hold. The contract is
// api/openapi.yaml; a test holds the handlers to it.
package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// Options configure the handler.
type Options struct {
	// Gatherer gives /metrics its families; done, once they are encoded.
	Gatherer prometheus.TransactionalGatherer
	// Registerer, when set, takes the /metrics handler's own counters:
	// promhttp_metric_handler_errors_total counts the scrapes in which a
	// collector failed (its other series are still served).
	Registerer prometheus.Registerer
	// Ready says why the observer is not ready (no sample yet, a source of
	// the latest one failed); nil when it is.
	Ready func() error
	// Runs serves the run API; nil leaves the run endpoints answering 503
	// "runs are not enabled".
	Runs Runs
	// Diagnoses serves GET /api/v1/diagnoses; nil answers 503.
	Diagnoses Diagnoses
	// Token, when non-empty, is the bearer token every mutating request
	// (POST, DELETE) must carry.
	Token string
	// Page, when set, serves the built-in live page at / and its own
	// resources under /live/ (GET only). Without it / is a 404 like any
	// unknown path.
	Page http.Handler
	// Pprof serves the Go runtime's profiles under /debug/pprof/ (GET only),
	// to see where the observer's own CPU and memory go.
	Pprof bool
	// ListenHosts are the IP addresses the observer listens on. Without a
	// Token, a request whose Host is neither one of them nor localhost is
	// refused (421): the DNS-rebinding guard. Empty: no Host check.
	ListenHosts []string
	// Logger takes the 500s' causes; nil discards them.
	Logger *slog.Logger
}

// NewHandler returns the observer's HTTP handler.
func NewHandler(opts Options) http.Handler {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	rt := newRoutes()
	metricsOpts := promhttp.HandlerOpts{
		ErrorLog:            &gatherLog{logger: logger},
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: scrapesInFlight,
		DisableCompression:  true, // compressed by scrapeGzip
	}
	if opts.Registerer != nil {
		metricsOpts.Registry = opts.Registerer
	}
	rt.handle("GET /metrics", wholeResponse(scrapeGzip(promhttp.HandlerForTransactional(opts.Gatherer, metricsOpts), newScrapeWriters())))
	rt.handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	rt.handle("GET /readyz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := opts.Ready(); err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}))
	(&runAPI{runs: opts.Runs, token: opts.Token, logger: logger}).register(rt)
	registerDiagnoses(rt, opts.Diagnoses)
	if opts.Pprof {
		rt.handle("GET /debug/pprof/", http.HandlerFunc(servePprof))
	}
	if opts.Page != nil {
		// "/{$}" is the root alone: every other unknown path stays a JSON 404.
		rt.handle("GET /{$}", opts.Page)
		rt.handle("GET /live/", opts.Page)
	}
	return guard(rt.finish(), opts.Token != "", opts.ListenHosts)
}

// scrapeGzip compresses a scrape for a client that accepts gzip, at the
// fastest level, with klauspost/compress's gzip: at promhttp's default
// level the compression was most of a scrape's CPU, on every host and every
// few seconds (bench/README.md, "Where the defaults come from"). The
// negotiation is a few lines here, not gzhttp's, which links a zstd encoder
// the daemon never uses.
//
// Its compressors are kept (scrapeWriters), not pooled in a sync.Pool that
// each GC empties: at a scrape a second through a run a compressor was made
// again after every GC, half of what the observer allocated.
func scrapeGzip(h http.Handler, kept *scrapeWriters) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		if !acceptsGzip(r.Header.Values("Accept-Encoding")) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := kept.get(w)
		defer kept.put(zw)
		gw := &gzipResponse{ResponseWriter: w, zw: zw}
		h.ServeHTTP(gw, r)
		gw.finish()
	})
}

// acceptsGzip reports whether Accept-Encoding values take gzip: gzip,
// x-gzip or * with a q above 0, and no gzip;q=0.
func acceptsGzip(values []string) bool {
	star, gz := false, false
	for _, v := range values {
		for coding := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(coding, ";")
			ok := true
			for p := range strings.SplitSeq(params, ";") {
				k, q, found := strings.Cut(strings.TrimSpace(p), "=")
				if found && strings.EqualFold(k, "q") {
					f, err := strconv.ParseFloat(strings.TrimSpace(q), 64)
					ok = err == nil && f > 0
				}
			}
			switch name = strings.ToLower(strings.TrimSpace(name)); name {
			case "gzip", "x-gzip":
				if !ok {
					return false
				}
				gz = true
			case "*":
				star = ok
			}
		}
	}
	return gz || star
}

// gzipResponse sends what its handler writes through a compressor, unless
// the handler took Content-Encoding back before its header went out (promhttp
// does, to send an error as plain text): then it passes the body as it is.
type gzipResponse struct {
	http.ResponseWriter
	zw                 *gzip.Writer
	wroteHeader, plain bool
}

func (g *gzipResponse) WriteHeader(code int) {
	if !g.wroteHeader {
		g.wroteHeader = true
		if g.Header().Get("Content-Encoding") == "gzip" {
			g.Header().Del("Content-Length") // of the plain text
		} else {
			g.plain = true
		}
	}
	g.ResponseWriter.WriteHeader(code)
}

func (g *gzipResponse) Write(p []byte) (int, error) {
	if !g.wroteHeader {
		g.WriteHeader(http.StatusOK)
	}
	if g.plain {
		return g.ResponseWriter.Write(p)
	}
	return g.zw.Write(p)
}

// finish ends the gzip stream, unless the body went plain.
func (g *gzipResponse) finish() {
	if !g.plain {
		_ = g.zw.Close()
	}
}

// wholeResponse sends what h writes in one piece, with its length: a
// scrape written as it is encoded leaves in net/http's small writes, each
// a system call and a wake of the scraper's side of the loopback (bench/
// README.md, Where the defaults come from). The buffers are kept for the
// next scrape, up to keptResponseBytes each.
func wholeResponse(h http.Handler) http.Handler {
	free := make(chan *bytes.Buffer, scrapesInFlight)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf *bytes.Buffer
		select {
		case buf = <-free:
		default:
			buf = new(bytes.Buffer)
		}
		bw := &bufferedWriter{w: w, buf: buf, status: http.StatusOK}
		h.ServeHTTP(bw, r)
		if w.Header().Get("Content-Length") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
		}
		w.WriteHeader(bw.status)
		_, _ = w.Write(buf.Bytes())
		if buf.Cap() <= keptResponseBytes {
			buf.Reset()
			select {
			case free <- buf:
			default:
			}
		}
	})
}

// keptResponseBytes is the largest response buffer kept for the next
// scrape: several of a run's scrapes, plain (bench/README.md).
const keptResponseBytes = 1 << 20

// bufferedWriter holds a response's status and body until its handler
// returns.
type bufferedWriter struct {
	w           http.ResponseWriter
	buf         *bytes.Buffer
	status      int
	wroteHeader bool
}

func (b *bufferedWriter) Header() http.Header { return b.w.Header() }

func (b *bufferedWriter) WriteHeader(code int) {
	if !b.wroteHeader {
		b.status, b.wroteHeader = code, true
	}
}

func (b *bufferedWriter) Write(p []byte) (int, error) {
	b.wroteHeader = true
	return b.buf.Write(p)
}

// scrapesInFlight bounds the scrapes served at once (promhttp's
// MaxRequestsInFlight), and so the compressors kept.
const scrapesInFlight = 4

// scrapeWriters keeps up to cap(free) gzip compressors from one scrape to
// the next.
type scrapeWriters struct {
	free chan *gzip.Writer
	made atomic.Int64 // compressors made, for tests
}

func newScrapeWriters() *scrapeWriters {
	return &scrapeWriters{free: make(chan *gzip.Writer, scrapesInFlight)}
}

// get returns a compressor writing to w: a kept one, else a new one.
func (k *scrapeWriters) get(w io.Writer) *gzip.Writer {
	select {
	case zw := <-k.free:
		zw.Reset(w)
		return zw
	default:
	}
	k.made.Add(1)
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		panic(err) // a constant level
	}
	return zw
}

// put keeps zw for the next scrape, if there is room, without the response
// writer it held.
func (k *scrapeWriters) put(zw *gzip.Writer) {
	zw.Reset(io.Discard)
	select {
	case k.free <- zw:
	default:
	}
}

// guard keeps a web page on another site from using the observer through a
// developer's browser:
//   - without a token (loopback only) a request must name the observer in
//     Host by one of the addresses it listens on, or localhost. DNS
//     rebinding points a name the attacker owns at 127.0.0.1; the browser
//     then sends that name. No listen hosts given: no check.
//   - a mutating request from another origin is refused (Go's
//     CrossOriginProtection: Sec-Fetch-Site, else Origin against Host).
//     The live page, served from the observer itself, is same-origin.
func guard(h http.Handler, tokenSet bool, listenHosts []string) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "a cross-origin "+r.Method+" is refused: send it from the observer's own page, curl or a client that does not set Origin or Sec-Fetch-Site")
	}))
	h = cop.Handler(h)
	if tokenSet || len(listenHosts) == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !knownHost(r.Host, listenHosts) {
			writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("Host %q is not an address of this observer: without --web.api-token-file it answers only to localhost or the address it listens on (%s); a name pointed at it by DNS is refused", strictjson.Clip(r.Host), strings.Join(listenHosts, ", ")))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// knownHost reports whether a Host header (with or without a port) is
// localhost or one of the listen hosts; a loopback address stands for any
// other, as 127.0.0.2 reaches a listener on 127.0.0.1 only through the
// kernel's own routing.
func knownHost(host string, listen []string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	for _, l := range listen {
		if strings.EqualFold(host, l) {
			return true
		}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	for _, l := range listen {
		if b, err := netip.ParseAddr(l); err == nil && (a.Unmap() == b.Unmap() || a.IsLoopback() && b.IsLoopback() || b.IsUnspecified()) {
			return true
		}
	}
	return false
}

// routes is a ServeMux that remembers each path's methods, so a known path
// asked with another method gets a JSON 405 with Allow rather than the
// mux's plain-text one, and anything else a JSON 404.
type routes struct {
	mux     *http.ServeMux
	paths   []string
	methods map[string][]string
}

func newRoutes() *routes {
	return &routes{mux: http.NewServeMux(), methods: map[string][]string{}}
}

// handle registers a "METHOD /path" pattern.
func (rt *routes) handle(pattern string, h http.Handler) {
	method, path, _ := strings.Cut(pattern, " ")
	if _, ok := rt.methods[path]; !ok {
		rt.paths = append(rt.paths, path)
	}
	rt.methods[path] = append(rt.methods[path], method)
	rt.mux.Handle(pattern, h)
}

func (rt *routes) finish() http.Handler {
	for _, path := range rt.paths {
		methods := rt.methods[path]
		allow := methods
		if slices.Contains(methods, http.MethodGet) {
			allow = append(slices.Clone(methods), http.MethodHead) // GET patterns serve HEAD too
		}
		// "METHOD /p" is more specific than "/p", so this takes only the
		// methods registered above did not.
		rt.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": method not allowed; use "+strings.Join(methods, " or "))
		})
	}
	var shown []string
	for _, p := range rt.paths {
		shown = append(shown, strings.TrimSuffix(p, "{$}"))
	}
	known := strings.Join(shown, ", ")
	rt.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path+"; see "+known)
	})
	return rt.mux
}

// servePprof is net/http/pprof under one pattern: the index serves the
// named profiles (heap, goroutine, ...) itself.
func servePprof(w http.ResponseWriter, r *http.Request) {
	switch strings.TrimPrefix(r.URL.Path, "/debug/pprof/") {
	case "cmdline":
		pprof.Cmdline(w, r)
	case "profile":
		pprof.Profile(w, r)
	case "symbol":
		pprof.Symbol(w, r)
	case "trace":
		pprof.Trace(w, r)
	default:
		pprof.Index(w, r)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes the API's one error shape, {"error": "..."}.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// gatherLog takes the /metrics handler's errors: a collector that failed is
// said once, then again when the error changes or a minute has passed, not
// on every scrape.
type gatherLog struct {
	logger *slog.Logger
	mu     sync.Mutex
	last   string
	at     time.Time
}

func (g *gatherLog) Println(v ...any) {
	msg := strings.TrimSpace(fmt.Sprintln(v...))
	g.mu.Lock()
	defer g.mu.Unlock()
	if msg == g.last && time.Since(g.at) < time.Minute {
		return
	}
	g.last, g.at = msg, time.Now()
	g.logger.Error("a collector failed; its other series are served", "err", msg)
}
