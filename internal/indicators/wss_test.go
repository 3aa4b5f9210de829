package indicators

import (
	"context"
	"errors"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/procfs"
)

// wssFixture copies testdata/wss/<tree> to a temporary procfs, since a scan
// writes each clear_refs.
//
// In proc: 100, 200 and 300 are well; 500's smaps is malformed; 600's
// is empty, as when the process exits between open and read. Their stat rss
// is 1000, 3000, 500, 10 and 10 pages; 200 also has 1024 pages in swap.
func wssFixture(t *testing.T, tree string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "proc")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "wss", tree))); err != nil {
		t.Fatal(err)
	}
	return dir
}

// cleared reports whether pid's clear_refs was written "1" since the last
// call, and empties it again.
func cleared(t *testing.T, proc, pid string) bool {
	t.Helper()
	path := filepath.Join(proc, pid, "clear_refs")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return string(b) == "1"
}

func TestWorkingSetRounds(t *testing.T) {
	proc := wssFixture(t, "proc")
	const tau = 100 * time.Millisecond
	w := NewWorkingSet(WorkingSetConfig{ProcfsPath: proc, Interval: tau, PageBudget: 1 << 30})

	if err := w.ScanOnce([]int{200, 100}); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{100, 200} {
		if b, ok := w.Get(pid); ok {
			t.Errorf("first round: Get(%d) = %d, true; nothing was cleared τ ago, want no estimate", pid, b)
		}
		if !cleared(t, proc, strconv.Itoa(pid)) {
			t.Errorf("first round did not clear %d's accessed bits", pid)
		}
	}

	time.Sleep(tau)
	before := time.Now()
	if err := w.ScanOnce([]int{200, 100}); err != nil {
		t.Fatal(err)
	}
	for pid, want := range map[int]uint64{100: 1200 << 10, 200: 8192 << 10} {
		e, ok := w.Estimate(pid)
		if !ok || e.Bytes != want {
			t.Errorf("second round: Estimate(%d) = %d, %v; want %d (Referenced)", pid, e.Bytes, ok, want)
		}
		if !e.From.Before(before) || !e.To.After(before) || e.Window() < tau {
			t.Errorf("pid %d: window %v to %v (%v) should open in round 1 and close in round 2, %v apart", pid, e.From, e.To, e.Window(), tau)
		}
		if e.Irregular {
			t.Errorf("pid %d: a %v window with τ %v flagged irregular", pid, e.Window(), tau)
		}
		if !cleared(t, proc, strconv.Itoa(pid)) {
			t.Errorf("second round did not clear %d's accessed bits", pid)
		}
	}
	// Round 1 counts stat's rss; round 2 smaps' Rss+Swap pages:
	// (4000 + 0) / 4 and (12000 + 4096) / 4.
	if got := w.Stats(); got.PagesScanned != 1000+3000+1000+4024 || got.ProcessesScanned != 4 || got.ProcessesSkipped != 0 || got.ScanSeconds <= 0 {
		t.Errorf("stats %+v, want 9024 pages and 4 processes scanned, none skipped, and some ScanSeconds", got)
	}

	// A round late by more than half of τ still reports, flagged.
	time.Sleep(3 * tau)
	if err := w.ScanOnce([]int{100}); err != nil {
		t.Fatal(err)
	}
	if e, ok := w.Estimate(100); !ok || !e.Irregular || e.Window() < 3*tau {
		t.Errorf("late round: Estimate(100) = %+v, %v; want an irregular window of at least %v", e, ok, 3*tau)
	}
}

func TestWorkingSetEvery(t *testing.T) {
	// With Every 3 a process's bits are cleared in the round before its
	// turn and read in its turn, then left alone a round; pids stagger the
	// turns (phase = (round + pid) mod 3: 100 clears in rounds 1 and 4,
	// 200 in rounds 3 and 6).
	proc := wssFixture(t, "proc")
	w := NewWorkingSet(WorkingSetConfig{ProcfsPath: proc, Interval: 10 * time.Millisecond, PageBudget: 1 << 30, Every: 3})
	type round struct{ cleared, estimated []int }
	want := []round{
		{cleared: []int{100}},
		{estimated: []int{100}},
		{cleared: []int{200}, estimated: []int{100}},
		{cleared: []int{100}, estimated: []int{100, 200}},
		{estimated: []int{100, 200}},
		{cleared: []int{200}, estimated: []int{100, 200}},
	}
	var walks int
	for i, r := range want {
		if err := w.ScanOnce([]int{100, 200}); err != nil {
			t.Fatal(err)
		}
		var gotCleared, gotEstimated []int
		for _, pid := range []int{100, 200} {
			if cleared(t, proc, strconv.Itoa(pid)) {
				gotCleared = append(gotCleared, pid)
			}
			if _, ok := w.Get(pid); ok {
				gotEstimated = append(gotEstimated, pid)
			}
		}
		if !slices.Equal(gotCleared, r.cleared) || !slices.Equal(gotEstimated, r.estimated) {
			t.Errorf("round %d: cleared %v and estimates for %v, want %v and %v", i+1, gotCleared, gotEstimated, r.cleared, r.estimated)
		}
		walks += len(gotCleared)
	}
	// Reads: 100 in rounds 2 and 5, 200 in round 4. Scanned counts a
	// process once per round it was read or cleared.
	if got := w.Stats().ProcessesScanned; got != uint64(walks+3) {
		t.Errorf("%d process-rounds scanned, want %d (4 clears, 3 reads)", got, walks+3)
	}
}

func TestWorkingSetBudget(t *testing.T) {
	// Stat rss: 100 → 1000 pages, 200 → 3000, 300 → 500.
	tests := []struct {
		name        string
		budget      int64 // pages per second; τ is 1 s
		order       []int
		wantScanned []int
	}{
		{"all fit", 4500, []int{200, 100, 300}, []int{200, 100, 300}},
		{"busiest first", 3500, []int{200, 100, 300}, []int{200, 300}},
		{"too big for what is left", 2000, []int{200, 100, 300}, []int{100, 300}},
		{"spent", 1200, []int{100, 300, 200}, []int{100}},
		{"order decides", 1200, []int{300, 100, 200}, []int{300}},
		{"nothing fits", 100, []int{100, 200, 300}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := wssFixture(t, "proc")
			w := NewWorkingSet(WorkingSetConfig{ProcfsPath: proc, Interval: time.Second, PageBudget: tt.budget})
			if err := w.ScanOnce(tt.order); err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, pid := range tt.order {
				if cleared(t, proc, strconv.Itoa(pid)) {
					got = append(got, pid)
				}
			}
			if !slices.Equal(got, tt.wantScanned) {
				t.Errorf("scanned %v, want %v", got, tt.wantScanned)
			}
			st := w.Stats()
			if int(st.ProcessesScanned) != len(tt.wantScanned) || int(st.ProcessesSkipped) != len(tt.order)-len(tt.wantScanned) {
				t.Errorf("stats %+v, want %d scanned and %d skipped", st, len(tt.wantScanned), len(tt.order)-len(tt.wantScanned))
			}
		})
	}
}

func TestWorkingSetSkippedKeepsItsWindow(t *testing.T) {
	proc := wssFixture(t, "proc")
	const tau = 50 * time.Millisecond
	w := NewWorkingSet(WorkingSetConfig{ProcfsPath: proc, Interval: tau, PageBudget: 1 << 30})
	scan := func(pids ...int) {
		t.Helper()
		time.Sleep(tau)
		if err := w.ScanOnce(pids); err != nil {
			t.Fatal(err)
		}
	}
	scan(100, 300)
	scan(100, 300)
	first, _ := w.Estimate(300)

	w.cfg.PageBudget = 1000 * int64(time.Second/tau) // 100 takes it all
	scan(100, 300)
	if b, ok := w.Get(300); ok {
		t.Errorf("Get(300) = %d, true in a round that skipped it", b)
	}
	if _, ok := w.Get(100); !ok {
		t.Error("Get(100): no estimate in a round that scanned it")
	}

	w.cfg.PageBudget = 1 << 30
	scan(100, 300)
	e, ok := w.Estimate(300)
	// The window opened with the clear right after first's read.
	if !ok || !e.From.After(first.To) || e.From.Sub(first.To) > tau/2 {
		t.Fatalf("after a skip: Estimate(300) = %+v, %v; want the window opened two rounds ago, at %v", e, ok, first.To)
	}
	if !e.Irregular || e.Window() < 2*tau {
		t.Errorf("after a skip: window %v, irregular %v; want about 2τ (%v), flagged", e.Window(), e.Irregular, 2*tau)
	}
}

func TestWorkingSetDropsState(t *testing.T) {
	proc := wssFixture(t, "proc")
	w := NewWorkingSet(WorkingSetConfig{ProcfsPath: proc, Interval: time.Second})
	scan := func(pids ...int) {
		t.Helper()
		if err := w.ScanOnce(pids); err != nil {
			t.Fatalf("ScanOnce(%v): %v, want vanished processes to be no error", pids, err)
		}
	}
	scan(100, 200, 300, 600)
	scan(100, 200, 300, 600)
	for _, pid := range []int{100, 200, 300} {
		if _, ok := w.Get(pid); !ok {
			t.Fatalf("Get(%d): no estimate in the second round", pid)
		}
	}
	// 600's smaps reads empty: it exited between open and read.
	if _, ok := w.Get(600); ok {
		t.Error("Get(600): an estimate for a process whose smaps read empty")
	}

	// 100 exits, 200 is no longer tracked, 300's pid is reused.
	if err := os.RemoveAll(filepath.Join(proc, "100")); err != nil {
		t.Fatal(err)
	}
	stat := filepath.Join(proc, "300", "stat")
	b, err := os.ReadFile(stat)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stat, []byte(strings.Replace(string(b), " 300 1073741824 ", " 99999 1073741824 ", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	scan(100, 300)
	for _, pid := range []int{100, 200, 300, 600} {
		if _, ok := w.Get(pid); ok {
			t.Errorf("Get(%d): an estimate after the process exited, left the tracked set or was replaced", pid)
		}
	}
	if got := slices.Sorted(maps.Keys(w.state)); !slices.Equal(got, []int{300}) {
		t.Errorf("state kept for %v, want only the new 300", got)
	}
	scan(300)
	if _, ok := w.Get(300); !ok {
		t.Error("Get(300): the new process has no estimate in its second round")
	}
}

func TestWorkingSetMalformedRollup(t *testing.T) {
	proc := wssFixture(t, "proc")
	w := NewWorkingSet(WorkingSetConfig{ProcfsPath: proc, Interval: time.Second})
	if err := w.ScanOnce([]int{500, 100}); err != nil {
		t.Fatal(err)
	}
	err := w.ScanOnce([]int{500, 100})
	if err == nil || !strings.Contains(err.Error(), "pid 500") || !strings.Contains(err.Error(), "bad Referenced line") {
		t.Errorf("error = %v, want pid 500's bad Referenced line", err)
	}
	if errors.Is(err, procfs.ErrNoData) {
		t.Errorf("error %v is ErrNoData; a malformed file is a failure", err)
	}
	if _, ok := w.Get(500); ok {
		t.Error("Get(500): an estimate from a malformed smaps")
	}
	if _, ok := w.Get(100); !ok {
		t.Error("Get(100): one malformed process stopped the others' estimates")
	}
}

func TestWorkingSetKernelWithoutPageMonitor(t *testing.T) {
	proc := wssFixture(t, "proc-nopagemon")
	w := NewWorkingSet(WorkingSetConfig{ProcfsPath: proc, Interval: time.Second})
	for range 2 {
		if err := w.ScanOnce([]int{400}); !errors.Is(err, procfs.ErrNoData) {
			t.Fatalf("error = %v, want ErrNoData: no clear_refs or smaps on this kernel", err)
		}
	}
	if _, ok := w.Get(400); ok {
		t.Error("Get(400): an estimate without the files")
	}
}

func TestWorkingSetRun(t *testing.T) {
	proc := wssFixture(t, "proc")
	w := NewWorkingSet(WorkingSetConfig{ProcfsPath: proc, Interval: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, func() []int { return []int{100, 600} })
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if b, ok := w.Get(100); ok {
			if b != 1200<<10 {
				t.Errorf("Get(100) = %d, want %d", b, 1200<<10)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run gave no estimate for 100 within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// The demand scales the wall-clock working set, shared pages split, by the
// window's unstalled share, within the process's proportional footprint.
func TestWorkingSetDemand(t *testing.T) {
	from := time.Unix(100, 0)
	for _, tc := range []struct {
		name        string
		known       bool // the estimator has stall figures
		atOpen      time.Duration
		now         time.Duration
		hasNow      bool
		bytes, foot uint64
		own         uint64 // bytes with shared pages split; bytes when 0
		refaulted   uint64
		out         uint64 // in swap, and out to files
		wantDemand  uint64
		wantShare   float64
		wantHas     bool
		// the run-queue wait at the window's open and close
		delayKnown            bool
		delayAtOpen, delayNow time.Duration
		wantDelayShare        float64
		sys                   time.Duration // system CPU time in the window
		service               time.Duration // the major faults' service time in it
		wantSys, wantFault    float64
		wantSaturated         bool // the lost share at the cap: the demand a floor
	}{
		{name: "procfs alone", bytes: 4 << 20, foot: 10 << 20, wantDemand: 4 << 20},
		{name: "procfs alone, refaults", bytes: 4 << 20, refaulted: 3 << 20, out: 5 << 20, foot: 10 << 20, wantDemand: 7 << 20},
		{name: "refaults and stall", known: true, now: 500 * time.Millisecond, hasNow: true, bytes: 2 << 20, refaulted: 2 << 20, out: 5 << 20, foot: 10 << 20, wantDemand: 8 << 20, wantShare: 0.5, wantHas: true},
		{name: "refaults beyond swap", bytes: 4 << 20, refaulted: 30 << 20, out: 5 << 20, foot: 20 << 20, wantDemand: 9 << 20},
		{name: "refaults, nothing out", bytes: 4 << 20, refaulted: 3 << 20, foot: 10 << 20, wantDemand: 4 << 20},
		// A page-cache thrash: no swap, its pages out to the file, which the
		// footprint counts too.
		{name: "file refaults, pages out to the file", bytes: 4 << 20, refaulted: 3 << 20, out: 150 << 20, foot: 200 << 20, wantDemand: 7 << 20},
		{name: "never stalled", known: true, bytes: 4 << 20, foot: 10 << 20, wantDemand: 4 << 20, wantHas: true},
		{name: "half stalled", known: true, atOpen: time.Second, now: 1500 * time.Millisecond, hasNow: true, bytes: 4 << 20, foot: 10 << 20, wantDemand: 8 << 20, wantShare: 0.5, wantHas: true},
		{name: "capped by footprint", known: true, now: 800 * time.Millisecond, hasNow: true, bytes: 4 << 20, foot: 10 << 20, wantDemand: 10 << 20, wantShare: 0.8, wantHas: true},
		{name: "threads stalled at once", known: true, now: 3 * time.Second, hasNow: true, bytes: 1 << 20, foot: 100 << 20, wantDemand: uint64(float64(1<<20) / (1 - MaxStalledShare)), wantShare: MaxStalledShare, wantHas: true, wantSaturated: true},
		{name: "first stall seen in the window", known: true, now: 250 * time.Millisecond, hasNow: true, bytes: 3 << 20, foot: 10 << 20, wantDemand: 4 << 20, wantShare: 0.25, wantHas: true},
		{name: "shared pages split", known: true, now: 500 * time.Millisecond, hasNow: true, bytes: 6 << 20, own: 4 << 20, foot: 20 << 20, wantDemand: 8 << 20, wantShare: 0.5, wantHas: true},
		{name: "shared pages, unpressured", bytes: 6 << 20, own: 4 << 20, foot: 20 << 20, wantDemand: 4 << 20},
		{name: "waited for a CPU a quarter of it", known: true, now: 250 * time.Millisecond, hasNow: true, bytes: 2 << 20, foot: 10 << 20,
			delayKnown: true, delayAtOpen: time.Second, delayNow: 1250 * time.Millisecond, wantDemand: 4 << 20, wantShare: 0.25, wantHas: true, wantDelayShare: 0.25},
		{name: "waited for a CPU, procfs alone", bytes: 2 << 20, foot: 10 << 20,
			delayKnown: true, delayNow: 500 * time.Millisecond, wantDemand: 4 << 20, wantDelayShare: 0.5},
		{name: "stall and wait past the cap", known: true, now: 800 * time.Millisecond, hasNow: true, bytes: 1 << 20, foot: 100 << 20,
			delayKnown: true, delayNow: 800 * time.Millisecond, wantDemand: uint64(float64(1<<20) / (1 - MaxStalledShare)), wantShare: 0.8, wantHas: true, wantDelayShare: 0.8, wantSaturated: true},
		{name: "a thread that waited exited", bytes: 2 << 20, foot: 10 << 20,
			delayKnown: true, delayAtOpen: time.Second, delayNow: 100 * time.Millisecond, wantDemand: 2 << 20},
		// The heavy thrash of bench/diagnosis's short-2x: 0.2 s stalled, 0.4 s
		// in the kernel.
		{name: "faulting, longer in the kernel than stalled", known: true, now: 200 * time.Millisecond, hasNow: true, bytes: 2 << 20, refaulted: 1 << 20, out: 50 << 20, foot: 100 << 20,
			sys: 400 * time.Millisecond, wantDemand: 5 << 20, wantShare: 0.2, wantHas: true, wantSys: 0.4},
		{name: "faulting, longer stalled than in the kernel", known: true, now: 400 * time.Millisecond, hasNow: true, bytes: 2 << 20, refaulted: 1 << 20, out: 50 << 20, foot: 100 << 20,
			sys: 200 * time.Millisecond, wantDemand: 5 << 20, wantShare: 0.4, wantHas: true, wantSys: 0.2},
		// The faults took 0.8 of the window, most of it waiting for reads
		// PSI does not count.
		{name: "faulting, the faults' service time the most", known: true, now: 100 * time.Millisecond, hasNow: true, bytes: 1 << 20, refaulted: 1 << 20, out: 50 << 20, foot: 100 << 20,
			sys: 200 * time.Millisecond, service: 800 * time.Millisecond, wantDemand: 10 << 20, wantShare: 0.1, wantHas: true, wantSys: 0.2, wantFault: 0.8},
		// Its own system calls, no major fault: not lost.
		{name: "in the kernel, no fault", known: true, bytes: 2 << 20, foot: 100 << 20, sys: 500 * time.Millisecond, service: 100 * time.Millisecond, wantDemand: 2 << 20, wantHas: true},
		{name: "counters restarted", known: true, atOpen: 5 * time.Second, now: time.Second, hasNow: true, bytes: 4 << 20, foot: 10 << 20, wantDemand: 4 << 20, wantHas: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own := tc.own
			if own == 0 {
				own = tc.bytes
			}
			e := WorkingSetEstimate{Bytes: tc.bytes, DemandBytes: own, own: own, Refaulted: tc.refaulted, From: from, To: from.Add(time.Second), footprint: tc.foot, out: tc.out}
			opened := timeReading{stall: tc.atOpen, stallKnown: tc.known, hasStall: tc.known && tc.atOpen > 0, delay: tc.delayAtOpen, hasDelay: tc.delayKnown, serviceKnown: true}
			now := timeReading{stall: tc.now, stallKnown: tc.known, hasStall: tc.hasNow, delay: tc.delayNow, hasDelay: tc.delayKnown,
				sys: tc.sys, service: tc.service, serviceKnown: true, hasService: tc.service > 0}
			e.demand(opened, now)
			if math.Abs(e.SystemShare-tc.wantSys) > 1e-9 || math.Abs(e.FaultShare-tc.wantFault) > 1e-9 {
				t.Errorf("system share %v, fault share %v, want %v and %v", e.SystemShare, e.FaultShare, tc.wantSys, tc.wantFault)
			}
			if e.Saturated != tc.wantSaturated {
				t.Errorf("saturated %v, want %v", e.Saturated, tc.wantSaturated)
			}
			if math.Abs(e.RunDelayShare-tc.wantDelayShare) > 1e-9 {
				t.Errorf("run-delay share %v, want %v", e.RunDelayShare, tc.wantDelayShare)
			}
			if d := float64(e.DemandBytes) - float64(tc.wantDemand); math.Abs(d) > 1 || e.HasStall != tc.wantHas || math.Abs(e.StalledShare-tc.wantShare) > 1e-9 {
				t.Errorf("demand %d (share %v, has %v), want %d (share %v, has %v)", e.DemandBytes, e.StalledShare, e.HasStall, tc.wantDemand, tc.wantShare, tc.wantHas)
			}
		})
	}
}
