// Package live is the observer's built-in page at /: the paper's figures
// over the last 15 minutes, the thrash detector, the top thrashers and the
// active run, for a newcomer without Grafana. It reads the sample store and
// the run engine, renders the figures server-side (internal/figures), and
// is read-only: starting and aborting a run go through the token-checked
// run API from the page's script.
package live

import (
	"embed"
	"encoding/json"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
	"github.com/thrashscope/thrashscope/internal/history"
)

// RunStatus is the most recent run, as the page shows it.
type RunStatus struct {
	ID, Preset string
	State      string // pending, running, completed, aborted, failed
	Active     bool
	// Consumers holding memory now, those the schedule has active now, and
	// the run's total.
	ConsumersActive, ConsumersPlanned, Consumers int
	Elapsed, Duration                            time.Duration
	DemandBytes, LimitBytes                      int64
	// Policy says what the run's thrash-control policy is doing; empty
	// under none.
	Policy string
	// SwapDevice names the run's emulated swap device and what was
	// emulated on this host; empty for none.
	SwapDevice string
}

// Options configure the page.
type Options struct {
	History *history.Store
	// Run reports the most recent run, and false before any. Nil means
	// runs are not enabled: the page says so instead of offering the form.
	Run func() (RunStatus, bool)
	// Diagnoses are the open diagnoses, why each thrash happens; nil when
	// the observer makes none.
	Diagnoses func() []diagnosis.Diagnosis
	// TokenRequired puts a token field on the run form: the observer has
	// --web.api-token-file.
	TokenRequired bool
	// Interval is the sample interval; the page refreshes no faster.
	Interval time.Duration
	Logger   *slog.Logger
}

// minRefresh keeps a page open in many tabs from polling faster than a
// person can read.
const minRefresh = 2 * time.Second

// maxInFlight bounds the figure and status requests served at once; more
// get 503 and the page retries at its next refresh.
const maxInFlight = 16

//go:embed assets
var assets embed.FS

var pageTemplate = template.Must(template.New("page.html").Funcs(funcs).ParseFS(assets, "assets/page.html"))

// Handler serves the page and its resources.
type Handler struct {
	opts     Options
	mux      *http.ServeMux
	figs     *figureCache
	inFlight chan struct{}
}

// New returns the page handler.
func New(opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	h := &Handler{opts: opts, mux: http.NewServeMux(), figs: newFigureCache(opts.History), inFlight: make(chan struct{}, maxInFlight)}
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.HandleFunc("GET /live/status", h.bounded(h.status))
	h.mux.HandleFunc("GET /live/figures/{name}", h.bounded(h.figure))
	h.mux.HandleFunc("GET /live/assets/{file}", h.asset)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such page resource: "+r.URL.Path+"; the page is at /, its figures at /live/figures/{"+strings.Join(FigureNames, ",")+"}.svg")
	})
	return h
}

// ServeHTTP serves GET and HEAD; anything else is 405, as on the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secure(w.Header())
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": method not allowed; the page is read-only, use GET")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// csp lets the page load only its own script, style and figures, and
// talk only to this observer. form-action 'none' stops a form submitted
// without the script from putting a token in a URL.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'none'; base-uri 'none'; frame-ancestors 'none'"

func secure(h http.Header) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// bounded answers 503 past maxInFlight concurrent requests.
func (h *Handler) bounded(f http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case h.inFlight <- struct{}{}:
			defer func() { <-h.inFlight }()
			f(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "too many page requests at once; try again")
		}
	}
}

func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	h.render(w, "page.html", h.view())
}

func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	h.render(w, "status", h.view())
}

func (h *Handler) render(w http.ResponseWriter, name string, v view) {
	var b strings.Builder
	if err := pageTemplate.ExecuteTemplate(&b, name, v); err != nil {
		h.opts.Logger.Error("rendering the live page", "template", name, "err", err)
		writeError(w, http.StatusInternalServerError, "internal error: rendering the page: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(b.String()))
}

var assetTypes = map[string]string{
	"page.css": "text/css; charset=utf-8",
	"page.js":  "text/javascript; charset=utf-8",
}

func (h *Handler) asset(w http.ResponseWriter, r *http.Request) {
	file := r.PathValue("file")
	ct, ok := assetTypes[file]
	if !ok {
		writeError(w, http.StatusNotFound, "no such page asset: "+file+"; there are page.css and page.js")
		return
	}
	b, err := assets.ReadFile("assets/" + file)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal error: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", ct)
	// The assets change only with the binary; revalidating is cheap.
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// writeError is the API's error shape, {"error": "..."}, so a script or a
// person gets the same from every path.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
