package observer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
)

// observer diagnose prints the open diagnoses and the last closed ones,
// waits for one to open, and says clearly when no observer answers.
func TestDiagnoseCommand(t *testing.T) {
	t0 := time.Now()
	s := diagnosis.Sample{
		Group: "/app", Labels: map[string]string{"cgroup": "/app"}, Thrashing: true,
		Limits:   []diagnosis.Limit{{Kind: diagnosis.LimitOwn, Group: "/app", File: "memory.max", Bytes: 256 << 20, UsedBytes: 256 << 20}},
		Host:     diagnosis.Host{TotalBytes: 24 << 30, AvailableBytes: 20 << 30},
		Demand:   diagnosis.Demand{WorkingSetBytes: 640 << 20, ResidentBytes: 256 << 20, SwapBytes: 500 << 20},
		Evidence: diagnosis.Evidence{AnonFaultsPerSecond: 900, DeviceBusyPercent: -1, PoolFullPercent: -1},
	}
	tr := diagnosis.NewTracker()
	tr.Update(t0, []diagnosis.Sample{s})
	open := tr.Open()
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/diagnoses" {
			http.NotFound(w, r)
			return
		}
		calls++
		l := map[string][]diagnosis.Diagnosis{"open": {}, "closed": {}}
		if calls >= 3 { // opens at the third look
			l["open"] = open
		}
		json.NewEncoder(w).Encode(l)
	}))
	defer srv.Close()

	var out strings.Builder
	n, err := Diagnose(context.Background(), srv.URL, 10*time.Second, 3, &out)
	if err != nil || n != 1 || calls != 3 {
		t.Fatalf("Diagnose: %d open, %v after %d looks; want 1 at the third", n, err, calls)
	}
	for _, want := range []string{"Thrashing now (1):", "needs ~384 MiB more than its limit of 256 MiB", "binding: /app's memory.max (own), 256 MiB", "1. raise-limit /app:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	calls = -100 // never opens
	out.Reset()
	start := time.Now()
	if n, err := Diagnose(context.Background(), srv.URL, time.Second, 3, &out); err != nil || n != 0 || !strings.Contains(out.String(), "Nothing thrashes now (watched 1s).") {
		t.Errorf("nothing open: %d, %v, %q", n, err, out.String())
	}
	if d := time.Since(start); d < time.Second || d > 5*time.Second {
		t.Errorf("watched %s, want about 1 s", d)
	}

	if _, err := Diagnose(context.Background(), "http://127.0.0.1:1", 0, 3, &out); err == nil || !strings.Contains(err.Error(), "no observer answers at") {
		t.Errorf("no observer: %v, want it said", err)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(503)
		w.Write([]byte(`{"error":"diagnoses are not made here"}`))
	}))
	defer bad.Close()
	if _, err := Diagnose(context.Background(), bad.URL, 0, 3, &out); err == nil || !strings.Contains(err.Error(), "diagnoses are not made here") {
		t.Errorf("an observer without diagnoses: %v, want its reason", err)
	}
}
