package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestReadyzFollowsFirstSample(t *testing.T) {
	ready := false
	h := NewHandler(Options{Gatherer: prometheus.NewRegistry(), Ready: func() bool { return ready }})
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
	h := NewHandler(Options{Gatherer: prometheus.NewRegistry(), Ready: func() bool { return true }})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/metrics", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", rec.Code)
	}
}
