package standalone_test

import (
	"bytes"
	"encoding/csv"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

func csvRows(t *testing.T, path string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rows
}

// A Ctrl-C while the consumer runs alone stops it, and the run is aborted
// with nothing left behind; no other consumer starts.
func TestLoadgenRunCtrlCWhileAlone(t *testing.T) {
	testenv.RequirePrivileged(t)
	out := t.TempDir()
	var stderr bytes.Buffer
	cmd := exec.Command(testenv.Binary(t, "loadgen"), "run", "--preset=pair", "--scale=0.1", "--cycles=1000000", "--out="+out)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Ctrl-C once the record says a consumer runs alone.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		recs, _ := filepath.Glob(filepath.Join(out, "runs", "*", "record.json"))
		if len(recs) == 1 {
			if b, err := os.ReadFile(recs[0]); err == nil && bytes.Contains(b, []byte(`"alone"`)) {
				break
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no record with a consumer running alone after 30 s\n%s", stderr.String())
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("exit after Ctrl-C: %v, want status 1\n%s", err, stderr.String())
	}
	rec, _ := testenv.OnlyRecord(t, out)
	if rec.State != run.StateAborted || rec.Alone == nil || rec.Alone.Exit != "terminated" || rec.Alone.RunSeconds != 0 {
		t.Errorf("record after Ctrl-C while alone: %s %q, alone %+v; want aborted, the one alone terminated without a run time", rec.State, rec.Reason, rec.Alone)
	}
	for _, c := range rec.Consumers {
		if c.PID != 0 {
			t.Errorf("consumer %d started (pid %d) after the run was aborted", c.Index, c.PID)
		}
	}
	testenv.NoneAlive(t, rec)
	noScratch(t, out)
}

// noScratch fails if the run left its empty scratch/ in out.
func noScratch(t *testing.T, out string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(out, "scratch")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s/scratch left behind (%v)", out, err)
	}
}

// TestLoadgenRunCompletes: a short e4-shaped run, standalone, writes its
// record and samples and leaves nothing behind.
func TestLoadgenRunCompletes(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	out := t.TempDir()
	cmd := exec.Command(testenv.Binary(t, "loadgen"), "run", "--preset=e4", "--scale=0.1", "--consumers=4",
		"--interval=500ms", "--lead-in=0s", "--out="+out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("loadgen run: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "consumers ") || !strings.Contains(string(b), "completed") {
		t.Errorf("no progress line or outcome:\n%s", b)
	}
	rec, dir := testenv.OnlyRecord(t, out)
	if rec.State != run.StateCompleted || len(rec.Consumers) != 4 {
		t.Fatalf("record: %+v", rec)
	}
	for _, c := range rec.Consumers {
		if c.ActualStart == nil || c.ActualEnd == nil || c.Cycles == 0 || c.Exit != "ok" {
			t.Errorf("consumer %d: %+v", c.Index, c)
		}
	}
	// The run cgroup's own PSI and memory events, read as it ended.
	if _, ok := rec.MemoryEvents["max"]; rec.Pressure == nil || !ok {
		t.Errorf("record: pressure %+v, memory_events %v; want the run cgroup's memory.pressure and its events (max at least)", rec.Pressure, rec.MemoryEvents)
	}
	rows := csvRows(t, filepath.Join(dir, "samples.csv"))
	if len(rows) < 3 || rows[0][0] != "elapsed_seconds" { // 4 s at 1 s
		t.Errorf("samples.csv: %v", rows)
	}
	checkProcesses(t, rec, dir)
	testenv.NoneAlive(t, rec)
	noScratch(t, out)
}

// TestLoadgenRunOfFixedWork: with --cycles each consumer ends when its work
// is done, before its t_f, and the record has each one's run time and the
// run's makespan.
func TestLoadgenRunOfFixedWork(t *testing.T) {
	testenv.RequirePrivileged(t)
	out := t.TempDir()
	// 3 × 10 MB in 100 MiB: no swap needed. Consumer i starts 1 + i s after
	// the run and its t_f is 5 + i s; 5 cycles with 100 ms sleeps take
	// about half a second.
	cmd := exec.Command(testenv.Binary(t, "loadgen"), "run", "--preset=e4", "--scale=0.1", "--consumers=3",
		"--interval=1s", "--lead-in=1s", "--cycles=5", "--out="+out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("loadgen run: %v\n%s", err, b)
	}
	rec, _ := testenv.OnlyRecord(t, out)
	if rec.State != run.StateCompleted || len(rec.Consumers) != 3 || rec.Spec.Cycles != 5 {
		t.Fatalf("record: %+v", rec)
	}
	first, last := *rec.Consumers[0].ActualStart, *rec.Consumers[0].ActualEnd
	for _, c := range rec.Consumers {
		if c.ActualStart == nil || c.ActualEnd == nil || c.Exit != "ok" || c.Cycles != 5 {
			t.Fatalf("consumer %d: %+v, want 5 cycles and exit ok", c.Index, c)
		}
		if !c.ActualEnd.Before(c.PlannedEnd) {
			t.Errorf("consumer %d ended at %s, not before its t_f %s: time, not work, ended it", c.Index, c.ActualEnd, c.PlannedEnd)
		}
		if want := c.ActualEnd.Sub(*c.ActualStart).Seconds(); c.RunSeconds != want || c.RunSeconds <= 0 {
			t.Errorf("consumer %d: run_seconds %g, want its start to its end, %g", c.Index, c.RunSeconds, want)
		}
		if c.ActualStart.Before(first) {
			first = *c.ActualStart
		}
		if c.ActualEnd.After(last) {
			last = *c.ActualEnd
		}
	}
	if want := last.Sub(first).Seconds(); rec.MakespanSeconds != want {
		t.Errorf("makespan %g, want the first start to the last end, %g", rec.MakespanSeconds, want)
	}
	// One consumer of the same shape ran alone first; the plan started at
	// its end, and each slowdown divides by its run time.
	a := rec.Alone
	if a == nil || a.Exit != "ok" || a.Cycles != 5 || a.ActualEnd == nil || a.RunSeconds <= 0 {
		t.Fatalf("alone: %+v, want a consumer that did its 5 cycles", a)
	}
	for _, c := range rec.Consumers {
		if c.PlannedStart.Before(*a.ActualEnd) || c.ActualStart.Before(*a.ActualEnd) {
			t.Errorf("consumer %d planned at %s, started at %s, before the one alone ended at %s", c.Index, c.PlannedStart, c.ActualStart, a.ActualEnd)
		}
		if want := c.RunSeconds / a.RunSeconds; c.Slowdown != want {
			t.Errorf("consumer %d: slowdown %g, want %g / %g", c.Index, c.Slowdown, c.RunSeconds, a.RunSeconds)
		}
	}
	t.Logf("alone %.2f s; run times %.2f, %.2f, %.2f s; makespan %.2f s", a.RunSeconds, rec.Consumers[0].RunSeconds, rec.Consumers[1].RunSeconds, rec.Consumers[2].RunSeconds, rec.MakespanSeconds)
	testenv.NoneAlive(t, rec)
}

// checkProcesses: processes.csv has rows for the consumers of the record,
// their demand is S or 0, and a consumer holding its S is resident or in
// swap for most of it.
func checkProcesses(t *testing.T, rec run.Record, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, store.ProcessesFile))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := store.ParseProcesses(b)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, r := range rows {
		if r.Consumer < 0 || r.Consumer >= len(rec.Consumers) || rec.Consumers[r.Consumer].PID != r.PID {
			t.Fatalf("row for consumer %d pid %d does not match the record", r.Consumer, r.PID)
		}
		if r.Comm != run.ConsumerName(r.Consumer) {
			t.Errorf("consumer %d's comm is %q", r.Consumer, r.Comm)
		}
		if r.DemandBytes != 0 && r.DemandBytes != rec.Spec.SizeBytes {
			t.Errorf("consumer %d demands %d bytes at %gs, want 0 or %d", r.Consumer, r.DemandBytes, r.ElapsedSeconds, rec.Spec.SizeBytes)
		}
		if r.DemandBytes > 0 && r.ResidentBytes+r.SwapBytes >= rec.Spec.SizeBytes/2 {
			seen[r.Consumer] = true
		}
	}
	if len(seen) < len(rec.Consumers)/2 {
		t.Errorf("only consumers %v were seen holding half their demand; rows: %d", seen, len(rows))
	}
}

// TestLoadgenRunCtrlC: SIGINT aborts cleanly: the record says aborted, the
// consumers and the cgroup are gone.
func TestLoadgenRunCtrlC(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	out := t.TempDir()
	var stderr bytes.Buffer
	cmd := exec.Command(testenv.Binary(t, "loadgen"), "run", "--preset=e4", "--scale=0.1", "--lead-in=0s", "--out="+out)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Ctrl-C once consumers run, so that there is something to stop.
	const running = 3
	var consumers map[string]int
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		consumers = testenv.ChildrenOf(cmd.Process.Pid)
		maps.DeleteFunc(consumers, func(comm string, _ int) bool { return !strings.HasPrefix(comm, "consumer-") })
		if len(consumers) >= running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers running after 60 s, want %d before the Ctrl-C\n%s", len(consumers), running, stderr.String())
		}
	}
	begin := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("exit after Ctrl-C: %v, want status 1\n%s", err, stderr.String())
	}
	t.Logf("Ctrl-C to exit: %s", time.Since(begin).Round(time.Millisecond))
	rec, dir := testenv.OnlyRecord(t, out)
	if rec.State != run.StateAborted || rec.EndedAt == nil {
		t.Errorf("record after Ctrl-C: %s %q", rec.State, rec.Reason)
	}
	if _, err := os.Stat(filepath.Join(dir, "samples.csv")); err != nil {
		t.Error(err)
	}
	for comm, pid := range consumers {
		if i := slices.IndexFunc(rec.Consumers, func(c run.ConsumerRecord) bool { return c.PID == pid }); i < 0 {
			t.Errorf("%s (pid %d) ran before the Ctrl-C, and the record does not list it", comm, pid)
		}
	}
	testenv.NoneAlive(t, rec)
}

// TestLoadgenFill is seed 002's experiment at a small size: chunks past the
// limit into swap, each timed over the repeats.
func TestLoadgenFill(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	out := t.TempDir()
	cmd := exec.Command(testenv.Binary(t, "loadgen"), "fill", "--memory-limit=64MiB", "--chunk=16MiB", "--total=96MiB", "--repeats=3", "--out="+out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("loadgen fill: %v\n%s", err, b)
	}
	rec, dir := testenv.OnlyRecord(t, out)
	if rec.State != run.StateCompleted {
		t.Fatalf("fill run %s: %s", rec.State, rec.Reason)
	}
	rows := csvRows(t, filepath.Join(dir, "fill.csv"))
	if len(rows) != 7 {
		t.Fatalf("fill.csv: want a header and 6 chunks, got %v", rows)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	// The baseline is the fastest chunk that fits well under the limit (16
	// and 32 MiB of 64): one chunk slowed by the host, e.g. reclaim left
	// over from an earlier thrash, must not stand for "free memory".
	var first, last float64
	for i, r := range rows[1:] {
		mean, _ := strconv.ParseFloat(r[col["fill_seconds_mean"]], 64)
		sd, err := strconv.ParseFloat(r[col["fill_seconds_sd"]], 64)
		if mean <= 0 || err != nil || sd < 0 || r[col["repeats"]] != "3" {
			t.Errorf("chunk %d: %v", i, r)
		}
		if i == 0 || i == 1 && mean < first {
			first = mean
		}
		last = mean
	}
	// Past the 64 MiB limit the fill pushes earlier chunks out to swap.
	t.Logf("fill time: fastest chunk under the limit %.1f ms, last (past the limit) %.1f ms", first*1e3, last*1e3)
	if last <= first {
		t.Errorf("filling past the limit (%.4fs) was not slower than filling under it (%.4fs)", last, first)
	}
	testenv.NoneAlive(t, rec)
}

// A run asking for a host-wide setting without the opt-in is refused,
// naming the flag, before anything changes: vm.page-cluster as it was,
// and no scratch/ or journal left in --out.
func TestLoadgenRunRefusesHostSettingsWithoutTheOptIn(t *testing.T) {
	testenv.RequirePrivileged(t)
	before, err := os.ReadFile("/proc/sys/vm/page-cluster")
	if err != nil {
		testenv.Unavailable(t, "no vm.page-cluster: "+err.Error())
	}
	want := "0"
	if strings.TrimSpace(string(before)) == "0" {
		want = "1"
	}
	out := t.TempDir()
	b, err := exec.Command(testenv.Binary(t, "loadgen"), "run", "--preset=e4", "--scale=0.05",
		"--settings", `{"page_cluster":`+want+`}`, "--out="+out).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(b), "--settings.allow-host") {
		t.Errorf("loadgen run with a host setting and no opt-in: %v\n%s\nwant exit 2 naming --settings.allow-host", err, b)
	}
	if after, _ := os.ReadFile("/proc/sys/vm/page-cluster"); string(after) != string(before) {
		t.Errorf("vm.page-cluster %q after the refusal, was %q", after, before)
	}
	noScratch(t, out)
	if _, err := os.Stat(filepath.Join(out, "settings-journal.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a journal was left in %s (%v)", out, err)
	}
}
