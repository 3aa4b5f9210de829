package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// Runs is what the run API needs from the run engine. The reads write
// what they serve to w as they go, their memory bounded whatever the data
// dir holds, and stop when ctx is done (the client went away).
type Runs interface {
	Start(spec run.Spec) (run.Record, error) // *run.FieldError→400, run.ErrBusy→409, *run.UnsafeError→422, run.ErrNoStorage→507, else 500
	// List is a page of run summaries, newest first: at most n, after the
	// run id after; next is the id the page after it starts after, "" at
	// the end.
	List(ctx context.Context, after string, n int) (page []run.Summary, next string, err error)
	WriteRecord(ctx context.Context, id string, w io.Writer) error  // JSON; run.ErrNotFound→404
	Abort(id string) (run.Record, error)                            // idempotent: aborting a finished run returns it unchanged, 200; ErrNotFound→404
	WriteSamples(ctx context.Context, id string, w io.Writer) error // CSV; ErrNotFound→404
}

// Pages of GET /api/v1/runs.
const (
	defaultPageSize = 50
	maxPageSize     = 500
)

// maxBodyBytes bounds a request body; a run spec is a few hundred bytes.
const maxBodyBytes = 64 << 10

var runIDPattern = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

const (
	specExample   = `{"preset":"e4","scale":0.1}`
	tokenHowTo    = `send the header "Authorization: Bearer <token>" with the token from the observer's --web.api-token-file`
	authChallenge = `Bearer realm="thrashscope"`
)

type runAPI struct {
	runs      Runs
	token     string
	tokenHash [sha256.Size]byte
	logger    *slog.Logger
}

func (a *runAPI) register(rt *routes) {
	a.tokenHash = sha256.Sum256([]byte(a.token))
	rt.handle("GET /api/v1/presets", http.HandlerFunc(a.presets))
	rt.handle("POST /api/v1/runs", http.HandlerFunc(a.start))
	rt.handle("GET /api/v1/runs", http.HandlerFunc(a.list))
	rt.handle("GET /api/v1/runs/{id}", http.HandlerFunc(a.get))
	rt.handle("DELETE /api/v1/runs/{id}", http.HandlerFunc(a.abort))
	rt.handle("GET /api/v1/runs/{id}/samples.csv", http.HandlerFunc(a.samples))
}

func (a *runAPI) presets(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, run.Presets())
}

func (a *runAPI) start(w http.ResponseWriter, r *http.Request) {
	if !a.authorized(w, r) || !a.enabled(w) {
		return
	}
	body, ok := specBody(w, r)
	if !ok {
		return
	}
	spec, err := run.DecodeSpec(body)
	if err != nil {
		a.fail(w, r, "", err)
		return
	}
	rec, err := a.runs.Start(spec)
	if err != nil {
		a.fail(w, r, "", err)
		return
	}
	w.Header().Set("Location", "/api/v1/runs/"+rec.ID)
	writeJSON(w, http.StatusCreated, wire(rec))
}

func (a *runAPI) list(w http.ResponseWriter, r *http.Request) {
	if !a.enabled(w) {
		return
	}
	n, after, ok := pageOf(w, r)
	if !ok {
		return
	}
	page, next, err := a.runs.List(r.Context(), after, n)
	if err != nil {
		a.fail(w, r, "", err)
		return
	}
	if page == nil {
		page = []run.Summary{}
	}
	writeJSON(w, http.StatusOK, runList{Runs: page, NextPageToken: next})
}

// runList is a page of GET /api/v1/runs.
type runList struct {
	Runs []run.Summary `json:"runs"`
	// NextPageToken, when set, is the page_token of the next page.
	NextPageToken string `json:"next_page_token,omitempty"`
}

// pageOf reads the list's query: page_size (1 to maxPageSize) and
// page_token (a run id, as next_page_token gave it). Anything else is 400.
func pageOf(w http.ResponseWriter, r *http.Request) (n int, after string, ok bool) {
	q := r.URL.Query()
	for name, vs := range q {
		switch {
		case name != "page_size" && name != "page_token":
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: unknown query parameter; the list takes page_size (1 to %d, default %d) and page_token (a next_page_token)", strictjson.Clip(name), maxPageSize, defaultPageSize))
			return 0, "", false
		case len(vs) > 1:
			writeError(w, http.StatusBadRequest, name+": given more than once")
			return 0, "", false
		}
	}
	n = defaultPageSize
	if v := q.Get("page_size"); q.Has("page_size") {
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > maxPageSize {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("page_size: %q: want 1 to %d runs a page", strictjson.Clip(v), maxPageSize))
			return 0, "", false
		}
		n = p
	}
	after = q.Get("page_token")
	if q.Has("page_token") && !runIDPattern.MatchString(after) {
		writeError(w, http.StatusBadRequest, "page_token: not a token this observer gave; use next_page_token from the page before, or leave it out for the first page")
		return 0, "", false
	}
	return n, after, true
}

func (a *runAPI) get(w http.ResponseWriter, r *http.Request) {
	id, ok := runID(w, r)
	if !ok || !a.enabled(w) {
		return
	}
	jw := &lateWriter{w: w, contentType: "application/json"}
	a.stream(w, r, id, jw, a.runs.WriteRecord(r.Context(), id, jw))
}

func (a *runAPI) abort(w http.ResponseWriter, r *http.Request) {
	if !a.authorized(w, r) {
		return
	}
	id, ok := runID(w, r)
	if !ok || !a.enabled(w) {
		return
	}
	rec, err := a.runs.Abort(id)
	if err != nil {
		a.fail(w, r, id, err)
		return
	}
	writeJSON(w, http.StatusOK, wire(rec))
}

func (a *runAPI) samples(w http.ResponseWriter, r *http.Request) {
	id, ok := runID(w, r)
	if !ok || !a.enabled(w) {
		return
	}
	cw := &lateWriter{w: w, contentType: "text/csv; charset=utf-8"}
	a.stream(w, r, id, cw, a.runs.WriteSamples(r.Context(), id, cw))
}

// stream ends a streamed reply. Headers go out with the first byte, so a
// run that is not there still gets a JSON 404 and the body streams rather
// than sitting in memory; a failure after the first byte cuts the
// connection, so the client sees a truncated body, not a complete-looking
// one.
func (a *runAPI) stream(w http.ResponseWriter, r *http.Request, id string, lw *lateWriter, err error) {
	switch {
	case err == nil:
		lw.begin()
	case r.Context().Err() != nil:
		// the client went away; nobody to answer
	case !lw.started:
		a.fail(w, r, id, err)
	default:
		a.logger.Error("streaming a reply", "path", r.URL.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// lateWriter sends 200 and its content type with the first byte written.
type lateWriter struct {
	w           http.ResponseWriter
	contentType string
	started     bool
}

func (c *lateWriter) begin() {
	if !c.started {
		c.started = true
		c.w.Header().Set("Content-Type", c.contentType)
		c.w.WriteHeader(http.StatusOK)
	}
}

func (c *lateWriter) Write(p []byte) (int, error) {
	c.begin()
	return c.w.Write(p)
}

// fail answers a run engine or decoding error with its status.
func (a *runAPI) fail(w http.ResponseWriter, r *http.Request, id string, err error) {
	var fe *run.FieldError
	var ue *run.UnsafeError
	switch {
	case errors.As(err, &fe):
		field := fe.Field
		if field == "" {
			field = "body"
		}
		writeError(w, http.StatusBadRequest, field+": "+fe.Msg)
	case errors.Is(err, run.ErrBusy):
		writeError(w, http.StatusConflict, err.Error()+"; wait for it to end or abort it with DELETE /api/v1/runs/{id} (GET /api/v1/runs lists it)")
	case errors.As(err, &ue):
		writeError(w, http.StatusUnprocessableEntity, ue.Error())
	case errors.Is(err, run.ErrNoStorage):
		writeError(w, http.StatusInsufficientStorage, err.Error())
	case errors.Is(err, run.ErrNotFound):
		// The manager's message may say more ("... has no samples.csv").
		msg := err.Error()
		if !strings.Contains(msg, id) {
			msg = "run " + id + ": " + msg
		}
		writeError(w, http.StatusNotFound, msg+"; GET /api/v1/runs lists the runs")
	default:
		// The cause can name files and paths of this host: it goes to the
		// log, and the client gets a reference to it.
		ref := fmt.Sprintf("%08x", rand.Uint32())
		a.logger.Error("run API", "method", r.Method, "path", r.URL.Path, "ref", ref, "err", err)
		writeError(w, http.StatusInternalServerError, "internal error; the observer's log has the cause under ref="+ref)
	}
}

func (a *runAPI) enabled(w http.ResponseWriter) bool {
	if a.runs == nil {
		writeError(w, http.StatusServiceUnavailable, "runs are not enabled")
		return false
	}
	return true
}

// authorized checks the bearer token of a mutating request. Reads stay
// open: they change nothing and the live page needs them.
func (a *runAPI) authorized(w http.ResponseWriter, r *http.Request) bool {
	if a.token == "" {
		return true
	}
	var msg string
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	switch {
	case scheme == "":
		msg = "authorization required: " + tokenHowTo
	case !strings.EqualFold(scheme, "Bearer"):
		msg = "Authorization: want a bearer token; " + tokenHowTo
	default:
		// Hashing first makes the comparison's time independent of the
		// token's length too.
		got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		if subtle.ConstantTimeCompare(got[:], a.tokenHash[:]) == 1 {
			return true
		}
		msg = "Authorization: the bearer token is wrong; " + tokenHowTo
	}
	w.Header().Set("WWW-Authenticate", authChallenge)
	writeError(w, http.StatusUnauthorized, msg)
	return false
}

// specBody reads a run spec's body, bounded, and checks it is JSON.
func specBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	tooLarge := fmt.Sprintf("body: larger than the %d-byte (64 KiB) limit; a run spec is a few hundred bytes, e.g. %s", maxBodyBytes, specExample)
	if r.ContentLength > maxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, tooLarge)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, tooLarge)
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, "body: reading it failed: "+err.Error())
		return nil, false
	case len(bytes.TrimSpace(body)) == 0:
		writeError(w, http.StatusBadRequest, "body: a JSON run spec is required, e.g. "+specExample)
		return nil, false
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: a run spec is JSON; set Content-Type: application/json", ct))
		return nil, false
	}
	return body, true
}

func runID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !runIDPattern.MatchString(id) {
		writeError(w, http.StatusBadRequest, `id: not a run id; want 1 to 64 characters of a-z, 0-9 and "-", as POST /api/v1/runs returned`)
		return "", false
	}
	return id, true
}

// wire is a record as the API sends it: consumers is a list even before
// any are planned.
func wire(rec run.Record) run.Record {
	if rec.Consumers == nil {
		rec.Consumers = []run.ConsumerRecord{}
	}
	return rec
}
