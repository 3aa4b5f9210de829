package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/run"
)

const (
	testToken  = "s3cret-token"
	wrongToken = "guessed-token"
)

func newTestHandler(runs Runs, token string) http.Handler {
	return NewHandler(Options{Gatherer: prometheus.ToTransactionalGatherer(prometheus.NewRegistry()), Ready: func() error { return nil }, Runs: runs, Token: token})
}

// serve runs one request; header pairs are name, value.
func serve(h http.Handler, method, target, body string, header ...string) *httptest.ResponseRecorder {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// errorOf returns a JSON error response's message, failing the test when
// the body is not the API's error shape.
func errorOf(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("error response Content-Type %q, want application/json", ct)
	}
	var e map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || len(e) != 1 || e["error"] == "" {
		t.Errorf("error body %q is not {\"error\": \"...\"}", rec.Body)
	}
	return e["error"]
}

const jsonCT = "application/json"

func TestStartMapsErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     string
		active   bool
		err      error // the manager fails with this instead
		wantCode int
		wantMsg  string // a prefix of the error message
	}{
		{name: "good", body: `{"preset":"e4","scale":0.1,"backing":"file"}`, wantCode: http.StatusCreated},
		{name: "bad field", body: `{"preset":"e4","consumers":0}`, wantCode: http.StatusBadRequest, wantMsg: "consumers: "},
		{name: "no preset", body: `{"scale":0.1}`, wantCode: http.StatusBadRequest, wantMsg: "preset: "},
		{name: "unknown field", body: `{"preset":"e4","cosumers":3}`, wantCode: http.StatusBadRequest, wantMsg: "cosumers: unknown field"},
		{name: "wrong type", body: `{"preset":"e4","scale":"big"}`, wantCode: http.StatusBadRequest, wantMsg: "scale: "},
		{name: "bad duration", body: `{"preset":"e4","sleep":"soon"}`, wantCode: http.StatusBadRequest, wantMsg: "sleep: "},
		{name: "not an object", body: `[1]`, wantCode: http.StatusBadRequest, wantMsg: "body: "},
		{name: "trailing data", body: `{"preset":"e4"} {}`, wantCode: http.StatusBadRequest, wantMsg: "body: "},
		{name: "busy", body: `{"preset":"e4","scale":0.1,"backing":"file"}`, active: true, wantCode: http.StatusConflict, wantMsg: "run run-2 is pending: another run is active"},
		{name: "unsafe", body: `{"preset":"e4","scale":0.1}`, wantCode: http.StatusUnprocessableEntity, wantMsg: "no swap configured"},
		{name: "field error without a field", body: `{"preset":"e4"}`, err: &run.FieldError{Msg: "odd"}, wantCode: http.StatusBadRequest, wantMsg: "body: odd"},
		{name: "internal", body: `{"preset":"e4"}`, err: errors.New("cgroup: permission denied"), wantCode: http.StatusInternalServerError, wantMsg: "internal error; the observer's log has the cause under ref="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := newFakeRuns(tc.active)
			runs.err = tc.err
			var logs bytes.Buffer
			h := NewHandler(Options{Gatherer: prometheus.ToTransactionalGatherer(prometheus.NewRegistry()), Ready: func() error { return nil },
				Runs: runs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			rec := serve(h, http.MethodPost, "/api/v1/runs", tc.body, "Content-Type", jsonCT)
			if rec.Code != tc.wantCode {
				t.Fatalf("POST %s: %d %s, want %d", tc.body, rec.Code, rec.Body, tc.wantCode)
			}
			if tc.wantCode == http.StatusCreated {
				var got run.Record
				if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
					t.Fatal(err)
				}
				if loc := rec.Header().Get("Location"); got.ID == "" || loc != "/api/v1/runs/"+got.ID {
					t.Errorf("Location %q for run %q", loc, got.ID)
				}
				return
			}
			msg := errorOf(t, rec)
			if !strings.HasPrefix(msg, tc.wantMsg) {
				t.Errorf("error %q, want it to start with %q", msg, tc.wantMsg)
			}
			if tc.wantCode == http.StatusInternalServerError {
				// The cause stays in the log, found by the reference.
				ref := strings.TrimPrefix(msg, tc.wantMsg)
				if strings.Contains(msg, "permission denied") || !strings.Contains(logs.String(), "ref="+ref) {
					t.Errorf("500 %q: the cause must stay out of the reply and be logged under its ref; log %q", msg, logs.String())
				}
			}
			if logged := strings.Contains(logs.String(), "permission denied"); logged != (tc.wantCode == http.StatusInternalServerError) {
				t.Errorf("logged %v for a %d: %q", logged, tc.wantCode, logs.String())
			}
		})
	}
}

func TestStartBody(t *testing.T) {
	h := newTestHandler(newFakeRuns(false), "")
	spec := `{"preset":"e4","scale":0.1,"backing":"file"}`
	padded := `{"preset":"e4",` + strings.Repeat(" ", maxBodyBytes) + `"scale":0.1}`
	for _, tc := range []struct {
		name     string
		body     string
		ct       string
		chunked  bool // no Content-Length, so only reading finds the size
		wantCode int
		wantMsg  string
	}{
		{name: "json", body: spec, ct: jsonCT, wantCode: http.StatusCreated},
		{name: "json with charset", body: spec, ct: "application/json; charset=utf-8", wantCode: http.StatusCreated},
		{name: "empty", ct: jsonCT, wantCode: http.StatusBadRequest, wantMsg: `body: a JSON run spec is required, e.g. {"preset":"e4","scale":0.1}`},
		{name: "empty without a type", wantCode: http.StatusBadRequest, wantMsg: `body: a JSON run spec is required, e.g. {"preset":"e4","scale":0.1}`},
		{name: "blank", body: " \n", ct: jsonCT, wantCode: http.StatusBadRequest, wantMsg: `body: a JSON run spec is required`},
		{name: "no type", body: spec, wantCode: http.StatusUnsupportedMediaType, wantMsg: `Content-Type "": a run spec is JSON; set Content-Type: application/json`},
		{name: "form", body: spec, ct: "application/x-www-form-urlencoded", wantCode: http.StatusUnsupportedMediaType, wantMsg: `Content-Type "application/x-www-form-urlencoded": a run spec is JSON; set Content-Type: application/json`},
		{name: "oversize", body: padded, ct: jsonCT, wantCode: http.StatusRequestEntityTooLarge, wantMsg: "body: larger than the 65536-byte (64 KiB) limit"},
		{name: "oversize chunked", body: padded, ct: jsonCT, chunked: true, wantCode: http.StatusRequestEntityTooLarge, wantMsg: "body: larger than the 65536-byte (64 KiB) limit"},
		{name: "at the limit", body: `{"preset":"e4",` + strings.Repeat(" ", maxBodyBytes-len(spec)) + spec[len(`{"preset":"e4",`):], ct: jsonCT, wantCode: http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h
			if tc.wantCode == http.StatusCreated {
				h = newTestHandler(newFakeRuns(false), "")
			}
			req := httptest.NewRequest(http.MethodPost, "/api/v1/runs", strings.NewReader(tc.body))
			if tc.chunked {
				req.ContentLength = -1
			}
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode {
				t.Fatalf("%d %s, want %d", rec.Code, rec.Body, tc.wantCode)
			}
			if tc.wantMsg != "" {
				if msg := errorOf(t, rec); !strings.HasPrefix(msg, tc.wantMsg) {
					t.Errorf("error %q, want it to start with %q", msg, tc.wantMsg)
				}
			}
		})
	}
}

func TestTokenGuardsMutations(t *testing.T) {
	spec := `{"preset":"e4","scale":0.1,"backing":"file"}`
	for _, tc := range []struct {
		name     string
		method   string
		target   string
		auth     string // the Authorization header; "" sends none
		wantCode int
	}{
		{"start without a token", http.MethodPost, "/api/v1/runs", "", http.StatusUnauthorized},
		{"start with a wrong token", http.MethodPost, "/api/v1/runs", "Bearer " + wrongToken, http.StatusUnauthorized},
		{"start with a longer token", http.MethodPost, "/api/v1/runs", "Bearer " + testToken + "x", http.StatusUnauthorized},
		{"start with basic auth", http.MethodPost, "/api/v1/runs", "Basic " + testToken, http.StatusUnauthorized},
		{"start with the scheme alone", http.MethodPost, "/api/v1/runs", "Bearer", http.StatusUnauthorized},
		{"start with the token", http.MethodPost, "/api/v1/runs", "Bearer " + testToken, http.StatusCreated},
		{"start with a lower-case scheme", http.MethodPost, "/api/v1/runs", "bearer " + testToken, http.StatusCreated},
		{"abort without a token", http.MethodDelete, "/api/v1/runs/run-1", "", http.StatusUnauthorized},
		{"abort with a wrong token", http.MethodDelete, "/api/v1/runs/run-1", "Bearer " + wrongToken, http.StatusUnauthorized},
		{"abort a bad id without a token", http.MethodDelete, "/api/v1/runs/NOPE", "", http.StatusUnauthorized},
		{"abort with the token", http.MethodDelete, "/api/v1/runs/run-1", "Bearer " + testToken, http.StatusOK},
		{"list without a token", http.MethodGet, "/api/v1/runs", "", http.StatusOK},
		{"get without a token", http.MethodGet, "/api/v1/runs/run-1", "", http.StatusOK},
		{"samples without a token", http.MethodGet, "/api/v1/runs/run-1/samples.csv", "", http.StatusOK},
		{"presets without a token", http.MethodGet, "/api/v1/presets", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHandler(newFakeRuns(false), testToken)
			header := []string{"Content-Type", jsonCT}
			if tc.auth != "" {
				header = append(header, "Authorization", tc.auth)
			}
			body := ""
			if tc.method == http.MethodPost {
				body = spec
			}
			rec := serve(h, tc.method, tc.target, body, header...)
			if rec.Code != tc.wantCode {
				t.Fatalf("%d %s, want %d", rec.Code, rec.Body, tc.wantCode)
			}
			if rec.Code != http.StatusUnauthorized {
				return
			}
			if got := rec.Header().Get("WWW-Authenticate"); got != `Bearer realm="thrashscope"` {
				t.Errorf("WWW-Authenticate %q", got)
			}
			msg := errorOf(t, rec)
			if !strings.Contains(msg, `"Authorization: Bearer <token>"`) || !strings.Contains(msg, "--web.api-token-file") {
				t.Errorf("error %q does not say how to pass the token", msg)
			}
			if strings.Contains(msg, testToken) || strings.Contains(msg, wrongToken) {
				t.Errorf("error %q echoes a token", msg)
			}
		})
	}

	// Without a token the observer allows mutations (only on loopback,
	// which the observer checks).
	h := newTestHandler(newFakeRuns(false), "")
	if rec := serve(h, http.MethodPost, "/api/v1/runs", spec, "Content-Type", jsonCT); rec.Code != http.StatusCreated {
		t.Errorf("POST without a configured token: %d %s, want 201", rec.Code, rec.Body)
	}
}

func TestRunsNotEnabled(t *testing.T) {
	h := newTestHandler(nil, "")
	for _, tc := range []struct{ method, target, body string }{
		{http.MethodPost, "/api/v1/runs", `{"preset":"e4"}`},
		{http.MethodGet, "/api/v1/runs", ""},
		{http.MethodGet, "/api/v1/runs/run-1", ""},
		{http.MethodDelete, "/api/v1/runs/run-1", ""},
		{http.MethodGet, "/api/v1/runs/run-1/samples.csv", ""},
	} {
		rec := serve(h, tc.method, tc.target, tc.body, "Content-Type", jsonCT)
		if rec.Code != http.StatusServiceUnavailable || errorOf(t, rec) != "runs are not enabled" {
			t.Errorf("%s %s: %d %s, want 503 runs are not enabled", tc.method, tc.target, rec.Code, rec.Body)
		}
	}
	rec := serve(h, http.MethodGet, "/api/v1/presets", "")
	var presets []run.Preset
	if err := json.Unmarshal(rec.Body.Bytes(), &presets); rec.Code != http.StatusOK || err != nil || len(presets) != len(run.Presets()) {
		t.Errorf("GET /api/v1/presets: %d %s, want 200 and every preset", rec.Code, rec.Body)
	}
}

func TestUnknownMethodsAndPaths(t *testing.T) {
	h := newTestHandler(newFakeRuns(false), "")
	for _, tc := range []struct {
		method, target string
		wantCode       int
		wantAllow      string
	}{
		{http.MethodPost, "/metrics", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodDelete, "/healthz", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodPut, "/api/v1/presets", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodPut, "/api/v1/runs", http.StatusMethodNotAllowed, "POST, GET, HEAD"},
		{http.MethodDelete, "/api/v1/runs", http.StatusMethodNotAllowed, "POST, GET, HEAD"},
		{http.MethodPost, "/api/v1/runs/run-1", http.StatusMethodNotAllowed, "GET, DELETE, HEAD"},
		{http.MethodPatch, "/api/v1/runs/run-1", http.StatusMethodNotAllowed, "GET, DELETE, HEAD"},
		{http.MethodDelete, "/api/v1/runs/run-1/samples.csv", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodGet, "/api/v1/runs/run-1/samples.json", http.StatusNotFound, ""},
		{http.MethodGet, "/api/v1/runs/", http.StatusNotFound, ""},
		{http.MethodGet, "/api/v2/runs", http.StatusNotFound, ""},
		{http.MethodPost, "/nope", http.StatusNotFound, ""},
	} {
		rec := serve(h, tc.method, tc.target, "")
		msg := errorOf(t, rec)
		if rec.Code != tc.wantCode || rec.Header().Get("Allow") != tc.wantAllow {
			t.Errorf("%s %s: %d Allow %q (%s), want %d Allow %q", tc.method, tc.target, rec.Code, rec.Header().Get("Allow"), msg, tc.wantCode, tc.wantAllow)
		}
		if tc.wantCode == http.StatusNotFound && !strings.Contains(msg, "/api/v1/runs") {
			t.Errorf("%s %s: 404 %q does not list the endpoints", tc.method, tc.target, msg)
		}
	}
}

func TestRunIDShape(t *testing.T) {
	h := newTestHandler(newFakeRuns(false), "")
	for _, target := range []string{
		"/api/v1/runs/Run-1",
		"/api/v1/runs/run_1",
		"/api/v1/runs/" + strings.Repeat("a", 65),
		"/api/v1/runs/run%201/samples.csv",
	} {
		rec := serve(h, http.MethodGet, target, "")
		if msg := errorOf(t, rec); rec.Code != http.StatusBadRequest || !strings.HasPrefix(msg, "id: ") {
			t.Errorf("GET %s: %d %q, want 400 naming id", target, rec.Code, msg)
		}
	}
	rec := serve(h, http.MethodGet, "/api/v1/runs/"+strings.Repeat("a", 64), "")
	if msg := errorOf(t, rec); rec.Code != http.StatusNotFound || !strings.Contains(msg, "no such run") {
		t.Errorf("GET a 64-character id: %d %q, want 404 no such run", rec.Code, msg)
	}
}

func TestRecordsAndAbort(t *testing.T) {
	runs := newFakeRuns(true)
	h := newTestHandler(runs, "")

	rec := serve(h, http.MethodGet, "/api/v1/runs", "")
	var list struct {
		Runs          []map[string]any
		NextPageToken string `json:"next_page_token"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &list); rec.Code != http.StatusOK || err != nil || len(list.Runs) != 2 || list.Runs[0]["id"] != "run-2" || list.NextPageToken != "" {
		t.Fatalf("GET /api/v1/runs: %d %s, want run-2 then run-1, and no next page", rec.Code, rec.Body)
	}
	// The list is of summaries: counts, not the consumers and decisions.
	if list.Runs[1]["consumer_count"] != 25.0 || list.Runs[1]["decision_count"] != 2.0 || list.Runs[1]["consumers"] != nil {
		t.Errorf("run-1 listed as %v, want its counts and not its consumers", list.Runs[1])
	}
	// A page at a time, the token leading on.
	rec = serve(h, http.MethodGet, "/api/v1/runs?page_size=1", "")
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Runs) != 1 || list.Runs[0]["id"] != "run-2" || list.NextPageToken != "run-2" {
		t.Fatalf("page 1: %s", rec.Body)
	}
	rec = serve(h, http.MethodGet, "/api/v1/runs?page_size=1&page_token="+list.NextPageToken, "")
	list.NextPageToken = ""
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil || len(list.Runs) != 1 || list.Runs[0]["id"] != "run-1" || list.NextPageToken != "" {
		t.Fatalf("page 2: %s", rec.Body)
	}
	// A pending run has no consumers yet; its record's are still a list.
	rec = serve(h, http.MethodGet, "/api/v1/runs/run-2", "")
	var pending map[string]any
	json.Unmarshal(rec.Body.Bytes(), &pending)
	if c, ok := pending["consumers"].([]any); !ok || len(c) != 0 {
		t.Errorf("pending run's consumers %#v, want []", pending["consumers"])
	}

	var first []byte
	for i := range 2 {
		rec := serve(h, http.MethodDelete, "/api/v1/runs/run-2", "")
		var got run.Record
		if err := json.Unmarshal(rec.Body.Bytes(), &got); rec.Code != http.StatusOK || err != nil || got.State != run.StateAborted {
			t.Fatalf("DELETE #%d: %d %s, want 200 aborted", i+1, rec.Code, rec.Body)
		}
		if i == 0 {
			first = rec.Body.Bytes()
		} else if !bytes.Equal(rec.Body.Bytes(), first) {
			t.Errorf("second DELETE changed the record:\n%s\nthen\n%s", first, rec.Body)
		}
	}

	rec = serve(h, http.MethodGet, "/api/v1/runs/run-9", "")
	if msg := errorOf(t, rec); rec.Code != http.StatusNotFound || msg != "run run-9: no such run; GET /api/v1/runs lists the runs" {
		t.Errorf("GET run-9: %d %q", rec.Code, msg)
	}
	rec = serve(h, http.MethodDelete, "/api/v1/runs/run-9", "")
	if rec.Code != http.StatusNotFound {
		t.Errorf("DELETE run-9: %d %s, want 404", rec.Code, rec.Body)
	}

	empty := newTestHandler(&fakeRuns{}, "")
	if rec := serve(empty, http.MethodGet, "/api/v1/runs", ""); strings.TrimSpace(rec.Body.String()) != `{"runs":[]}` {
		t.Errorf("no runs: %s, want {\"runs\":[]}", rec.Body)
	}
}

func TestSamplesCSV(t *testing.T) {
	runs := newFakeRuns(false)
	h := newTestHandler(runs, "")
	rec := serve(h, http.MethodGet, "/api/v1/runs/run-1/samples.csv", "")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/csv; charset=utf-8" {
		t.Fatalf("%d %q, want 200 text/csv; charset=utf-8", rec.Code, rec.Header().Get("Content-Type"))
	}
	if !strings.HasPrefix(rec.Body.String(), "elapsed_seconds,cpu_user_percent,cpu_system_percent,swap_in_pages_per_second,swap_out_pages_per_second") {
		t.Errorf("CSV starts %q", rec.Body.String())
	}

	rec = serve(h, http.MethodGet, "/api/v1/runs/run-9/samples.csv", "")
	if msg := errorOf(t, rec); rec.Code != http.StatusNotFound || !strings.Contains(msg, "no such run") {
		t.Errorf("missing run: %d %q, want a JSON 404", rec.Code, msg)
	}

	runs.err = errors.New("store: disk on fire")
	rec = serve(h, http.MethodGet, "/api/v1/runs/run-1/samples.csv", "")
	if msg := errorOf(t, rec); rec.Code != http.StatusInternalServerError || !strings.HasPrefix(msg, "internal error; ") || strings.Contains(msg, "disk on fire") {
		t.Errorf("failing store: %d %q, want a JSON 500", rec.Code, msg)
	}

	// Once rows are out the status is sent: the connection must be cut
	// rather than end as if the CSV were complete.
	runs.err, runs.samplesErr = nil, fmt.Errorf("store: lost sample 3")
	func() {
		defer func() {
			if r := recover(); r != http.ErrAbortHandler {
				t.Errorf("a failure mid-CSV recovered %v, want http.ErrAbortHandler", r)
			}
		}()
		serve(h, http.MethodGet, "/api/v1/runs/run-1/samples.csv", "")
	}()
}
