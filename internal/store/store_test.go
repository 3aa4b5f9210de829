package store

import (
	"encoding/csv"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/loadgen"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

func TestRecordsRoundTripNewestFirst(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for i, id := range []string{"older", "newer"} {
		rec := loadgen.Record{ID: id, State: loadgen.StateCompleted, StartedAt: t0.Add(time.Duration(i) * time.Hour),
			Consumers: []loadgen.ConsumerRecord{{Index: 0, PID: 42, Cycles: 7}}}
		if err := d.SaveRecord(rec); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := d.Records()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].ID != "newer" || recs[1].Consumers[0].Cycles != 7 {
		t.Fatalf("records: %+v", recs)
	}
	if _, err := d.LoadRecord("missing"); !errors.Is(err, loadgen.ErrNotFound) {
		t.Errorf("missing record: %v", err)
	}
	if _, err := d.LoadRecord("../etc"); !errors.Is(err, loadgen.ErrNotFound) {
		t.Errorf("path escape: %v", err)
	}
	if err := d.WriteFile("../../x", "f", nil); err == nil {
		t.Error("a path-escaping id was written")
	}
}

func TestAtomicWriteLeavesNoTemporaries(t *testing.T) {
	root := t.TempDir()
	d, _ := Open(root)
	if err := d.WriteFile("r1", SamplesFile, []byte("a\n")); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("r1", SamplesFile, []byte("b\n")); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "runs", "r1"))
	if len(ents) != 1 {
		t.Errorf("run dir holds %d files, want 1", len(ents))
	}
	b, _ := d.ReadFile("r1", SamplesFile)
	if string(b) != "b\n" {
		t.Errorf("got %q", b)
	}
	// A crash mid-write leaves a temporary; the next Open clears it and the
	// listing never shows it.
	tmp := filepath.Join(root, "runs", "r1", ".tmp-record.json-123")
	os.WriteFile(tmp, []byte(`{"id":`), 0o600)
	if _, err := Open(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Error("temporary file survived Open")
	}
}

func TestCorruptRecordIsReportedNotHidden(t *testing.T) {
	root := t.TempDir()
	d, _ := Open(root)
	d.SaveRecord(loadgen.Record{ID: "good"})
	os.MkdirAll(filepath.Join(root, "runs", "bad"), 0o750)
	os.WriteFile(filepath.Join(root, "runs", "bad", RecordFile), []byte("{"), 0o600)
	recs, err := d.Records()
	if len(recs) != 1 || err == nil || !strings.Contains(err.Error(), "bad") {
		t.Errorf("records %v, err %v", recs, err)
	}
}

func TestTableCSV(t *testing.T) {
	var tb Table
	tb.Append(Row{ElapsedSeconds: 1, Rates: sampler.Rates{CPUUserPercent: 12.5, SwapInPagesPerSecond: 300}, ConsumersActive: 3, DemandBytes: 30 << 20})
	recs, err := csv.NewReader(strings.NewReader(string(tb.CSV()))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := "elapsed_seconds,cpu_user_percent,cpu_system_percent,swap_in_pages_per_second,swap_out_pages_per_second"
	if got := strings.Join(recs[0][:5], ","); got != want {
		t.Errorf("header starts %q", got)
	}
	if len(recs) != 2 || len(recs[1]) != len(Columns) || recs[1][1] != "12.500" || recs[1][3] != "300.000" || recs[1][13] != "3" {
		t.Errorf("rows %v", recs)
	}
}

func TestPruneKeepsTheNewestAndActive(t *testing.T) {
	d, _ := Open(t.TempDir())
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for i := range 5 {
		state := loadgen.StateCompleted
		if i == 0 {
			state = loadgen.StateRunning // the oldest, but still active
		}
		d.SaveRecord(loadgen.Record{ID: "r" + string(rune('a'+i)), State: state, StartedAt: t0.Add(time.Duration(i) * time.Minute)})
	}
	removed, err := d.Prune(2)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := d.Records()
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "re,rd,ra" || strings.Join(removed, ",") != "rc,rb" {
		t.Errorf("kept %v, removed %v", ids, removed)
	}
}
