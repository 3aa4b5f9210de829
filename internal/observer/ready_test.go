package observer

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// /readyz says when the latest sample could not read a source, naming it,
// where it used to answer 200 while the observer served counters of 0.
func TestReadyzNamesAFailedSource(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("../procfs/testdata/proc")); err != nil {
		t.Fatal(err)
	}
	cfg := validConfig()
	cfg.ProcfsPath, cfg.Probes, cfg.WSSInterval = root, ProbesProcfs, 0
	o, err := build(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		o.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9752/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	_ = o.pipeline.Step()
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("a whole sample: %d %s", code, body)
	}
	os.WriteFile(filepath.Join(root, "vmstat"), nil, 0o644)
	_ = o.pipeline.Step()
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "could not read vmstat") {
		t.Errorf("vmstat emptied: %d %s, want 503 naming vmstat", code, body)
	}
}
