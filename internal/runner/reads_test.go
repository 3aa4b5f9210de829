package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/api"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/runner"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// errNoParent: these tests start no run.
var errNoParent = errors.New("no cgroup for runs in this test")

// bigRecord is a record of the largest size a run writes: 512 consumers
// and the 20,000 decisions a record keeps.
func bigRecord(t *testing.T, id string, at time.Time) []byte {
	t.Helper()
	rec := testenv.Record(id, run.StateCompleted, at)
	rec.Spec.Consumers, rec.Spec.Policy = run.MaxConsumers, "binpack"
	end := at.Add(time.Hour)
	rec.EndedAt = &end
	for i := range run.MaxConsumers {
		s, e := at.Add(time.Duration(i)*time.Second), at.Add(time.Duration(i)*time.Second+time.Minute)
		rec.Consumers = append(rec.Consumers, run.ConsumerRecord{Index: i, PID: 10000 + i, PlannedStart: s, ActualStart: &s,
			PlannedEnd: e, ActualEnd: &e, Cycles: 123456, LatenessSeconds: 0.25, Exit: "ok"})
	}
	for i := range run.MaxDecisions {
		rec.Decisions = append(rec.Decisions, run.Decision{At: at.Add(time.Duration(i) * time.Millisecond), Kind: "freeze",
			Consumer: i % run.MaxConsumers, Why: "out of bin 1 of 3 (99 % full) for 990ms, its turn over"})
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// peakHeap samples the Go heap every few milliseconds until stop, and
// returns its peak.
func peakHeap(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		var ms runtime.MemStats
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// The run API's reads need no token, so their memory is bounded whatever
// the data dir holds and however many ask. The defect: with 100 records of
// the largest size a run writes (3.6 MB each), one GET /api/v1/runs
// returned 345 MB and took the observer from 30 MB to 1.78 GB; six at once
// reached 10.1 GB and kept working after their clients gave up; 50 clients
// fetching one record took 485 MB.
func TestRunReadsAreBounded(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	template := bigRecord(t, "20261124-100000-000000", t0)
	var ids []string
	for i := range 100 {
		id := fmt.Sprintf("20261124-1%05d-%06x", i, i)
		ids = append(ids, id)
		b := strings.Replace(string(template), `"id": "20261124-100000-000000"`, `"id": "`+id+`"`, 1)
		if err := st.WriteFile(id, store.RecordFile, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	fs, _ := procfs.NewFS("/proc")
	m, err := runner.New(runner.Config{Store: st, ProcFS: fs, Binary: "loadgen", ParentErr: errNoParent})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.NewHandler(api.Options{Gatherer: prometheus.ToTransactionalGatherer(prometheus.NewRegistry()), Ready: func() error { return nil }, Runs: m.Service()}))
	defer srv.Close()
	get := func(path string) (int, []byte, error) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	// count reads a reply without keeping it: the heap measured is the
	// observer's, not this client's.
	count := func(path string) (int, int64, error) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, n, err
	}
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)

	// The list: summaries, a page at a time, every run once.
	stop := make(chan struct{})
	peak := peakHeap(stop)
	seen := map[string]bool{}
	pages, bytes := 0, 0
	for token := ""; ; {
		path := "/api/v1/runs"
		if token != "" {
			path += "?page_token=" + token
		}
		code, b, err := get(path)
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %s: %d %v %s", path, code, err, b)
		}
		var page struct {
			Runs []struct {
				ID, State     string
				ConsumerCount int `json:"consumer_count"`
			}
			Next string `json:"next_page_token"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatal(err)
		}
		pages, bytes = pages+1, bytes+len(b)
		for _, r := range page.Runs {
			if seen[r.ID] || r.State != run.StateCompleted || r.ConsumerCount != run.MaxConsumers {
				t.Errorf("listed %+v (seen before: %v)", r, seen[r.ID])
			}
			seen[r.ID] = true
		}
		if token = page.Next; token == "" {
			break
		}
	}
	close(stop)
	listPeak := <-peak
	if len(seen) != len(ids) || pages != 2 {
		t.Errorf("listed %d runs in %d pages, want %d in 2 (50 a page)", len(seen), pages, len(ids))
	}
	if bytes > 512<<10 {
		t.Errorf("the list of 100 runs is %d bytes; a summary is about a kilobyte", bytes)
	}
	t.Logf("the list of 100 runs: %d bytes in %d pages, heap peak %d MiB over %d MiB before", bytes, pages, (listPeak-base.HeapAlloc)>>20, base.HeapAlloc>>20)

	// 50 clients fetching one record at once, and six listing the most a
	// page holds: memory stays within a few records.
	runtime.GC()
	runtime.ReadMemStats(&base)
	stop = make(chan struct{})
	peak = peakHeap(stop)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			code, n, err := count("/api/v1/runs/" + ids[7])
			if err != nil || code != http.StatusOK || n < int64(len(template)) {
				t.Errorf("GET a record: %d, %d bytes, %v", code, n, err)
			}
		})
	}
	for range 6 {
		wg.Go(func() {
			if code, _, err := count("/api/v1/runs?page_size=500"); err != nil || code != http.StatusOK {
				t.Errorf("GET the list: %d %v", code, err)
			}
		})
	}
	wg.Wait()
	close(stop)
	grew := int64(<-peak) - int64(base.HeapAlloc)
	t.Logf("50 GETs of one %d-byte record and 6 lists at once: heap peak %d MiB over %d MiB before", len(template), grew>>20, base.HeapAlloc>>20)
	if grew > 64<<20 {
		t.Errorf("the heap grew %d MiB serving them; the reads are bounded to a few records' worth", grew>>20)
	}

	// A client that goes away stops the work: with every summary forgotten
	// (a data dir opened anew), a listing whose client gave up after 50 ms
	// ends within a record's decoding, not after all 100.
	fresh, _ := store.Open(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err = fresh.Summaries(ctx, "", store.MaxPageSize)
	if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > time.Second {
		t.Errorf("a listing whose client went away after 50 ms: %v after %s, want it stopped within a second", err, took)
	}
}
