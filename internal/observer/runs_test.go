package observer

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// daemon is the real bin/observer, run as a user runs it.
type daemon struct {
	url, dataDir string
	cmd          *exec.Cmd
	log          *os.File
}

func startDaemon(t *testing.T, dataDir string, args ...string) *daemon {
	t.Helper()
	dir := testenv.BinaryDir(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.CreateTemp(t.TempDir(), "observer-*.log")
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--web.listen-address=" + addr, "--data.dir=" + dataDir, "--sample.interval=500ms", "--log.level=debug"}, args...)
	cmd := exec.Command(filepath.Join(dir, "observer"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{url: "http://" + addr, dataDir: dataDir, cmd: cmd, log: logf}
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("observer log:\n%s", b)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(d.url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("observer not ready after 20 s:\n%s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *daemon) stop() {
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
}

func (d *daemon) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, d.url+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (d *daemon) startRun(t *testing.T, spec string) run.Record {
	t.Helper()
	code, b := d.do(t, "POST", "/api/v1/runs", spec)
	if code != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", spec, code, b)
	}
	var rec run.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

func (d *daemon) record(t *testing.T, id string) run.Record {
	t.Helper()
	code, b := d.do(t, "GET", "/api/v1/runs/"+id, "")
	if code != http.StatusOK {
		t.Fatalf("GET run %s: %d %s", id, code, b)
	}
	var rec run.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// waitFor polls until cond holds or the timeout passes.
// dumpStuck logs what a run that does not end waits on: the kernel stack of
// every thread in uninterruptible sleep, then the observer's goroutines
// (SIGQUIT: the Go runtime writes them to its log, which the cleanup shows
// when the test failed).
func (d *daemon) dumpStuck(t *testing.T) {
	t.Helper()
	threads, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*")
	for _, th := range threads {
		stat, err := os.ReadFile(filepath.Join(th, "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'D' {
			continue
		}
		stack, _ := os.ReadFile(filepath.Join(th, "stack"))
		t.Logf("%s in uninterruptible sleep, %s:\n%s", th, stat[:i+1], stack)
	}
	_ = d.cmd.Process.Signal(syscall.SIGQUIT)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && syscall.Kill(d.cmd.Process.Pid, 0) == nil {
		if b, _ := os.ReadFile(d.log.Name()); strings.Contains(string(b), "goroutine ") {
			time.Sleep(500 * time.Millisecond) // the rest of the dump
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ooms counts the consumers the OOM killer took.
func ooms(rec run.Record) int {
	n := 0
	for _, c := range rec.Consumers {
		if c.Exit == "oom-killed" {
			n++
		}
	}
	return n
}

func started(rec run.Record) int {
	n := 0
	for _, c := range rec.Consumers {
		if c.ActualStart != nil {
			n++
		}
	}
	return n
}

// alive reports which of the pids still exist (and are not zombies).
func alive(pids []int) []int {
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
			continue
		}
		out = append(out, pid)
	}
	return out
}

func pidsOf(rec run.Record) []int {
	var pids []int
	for _, c := range rec.Consumers {
		if c.PID != 0 {
			pids = append(pids, c.PID)
		}
	}
	return pids
}

func gone(path string) bool {
	_, err := os.Stat(path)
	return os.IsNotExist(err)
}

func readCSV(t *testing.T, b []byte) (map[string]int, [][]float64) {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
	if err != nil || len(rows) == 0 {
		t.Fatalf("samples.csv: %v\n%s", err, b)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	var out [][]float64
	for _, r := range rows[1:] {
		var v []float64
		for _, f := range r {
			x, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("samples.csv field %q: %v", f, err)
			}
			v = append(v, x)
		}
		out = append(out, v)
	}
	return col, out
}

// TestRunE4AtATenth is the paper's e4 at scale 0.1: 25 × 10 MB in 100 MiB,
// one consumer a second, 60 s, with real swap.
func TestRunE4AtATenth(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	d := startDaemon(t, t.TempDir())
	swapInsBefore := hostSwapIns(t)
	rec := d.startRun(t, `{"preset":"e4","scale":0.1}`)
	if rec.State != run.StateRunning || len(rec.Consumers) != 25 || rec.Cgroup == "" {
		t.Fatalf("new run: %+v", rec)
	}
	if code, b := d.do(t, "POST", "/api/v1/runs", `{"preset":"e4","scale":0.1}`); code != http.StatusConflict {
		t.Errorf("a second run while one is active: %d %s, want 409", code, b)
	}

	// During the plateau every started consumer is in the cgroup, and the
	// cgroup has the asked limit.
	// A consumer reports its start once its region is filled, which takes
	// a while in a cgroup this deep in a thrash: the last one is looked for
	// until the plateau's end. One the OOM killer took before it filled
	// never starts; the OOM count below judges those.
	from, to := rec.Spec.Plateau()
	time.Sleep(time.Until(rec.StartedAt.Add(from + 500*time.Millisecond)))
	var cur run.Record
	accounted := func() int {
		n := 0
		for _, c := range cur.Consumers {
			if c.ActualStart != nil || c.Exit == "oom-killed" {
				n++
			}
		}
		return n
	}
	for {
		cur = d.record(t, rec.ID)
		if accounted() == len(cur.Consumers) || time.Now().After(rec.StartedAt.Add(to)) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	own, err := cgroup.Own("/proc") // the observer's parent is this test's own cgroup
	if err != nil {
		t.Fatal(err)
	}
	cg, err := cgroup.Open(rec.Cgroup, own.V2)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cg.MemoryLimit(); err != nil || got != rec.Spec.MemoryLimitBytes {
		t.Errorf("cgroup limit %d (%v), want %d", got, err, rec.Spec.MemoryLimitBytes)
	}
	for _, c := range cur.Consumers {
		// A consumer waits outside and joins its own sub-cgroup at its start.
		group := filepath.Join(rec.Cgroup, cgroup.Prefix+run.ConsumerName(c.Index))
		procs, _ := os.ReadFile(filepath.Join(group, "cgroup.procs"))
		inside := map[int]bool{}
		for f := range strings.FieldsSeq(string(procs)) {
			pid, _ := strconv.Atoi(f)
			inside[pid] = true
		}
		if c.ActualStart != nil && c.Exit == "" && !inside[c.PID] {
			t.Errorf("consumer %d (pid %d) is not in %s", c.Index, c.PID, group)
		}
		if c.PID != 0 && c.Exit == "" {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.PID)); strings.TrimSpace(string(comm)) != run.ConsumerName(c.Index) {
				t.Errorf("consumer %d comm %q", c.Index, comm)
			}
		}
	}
	if accounted() != 25 {
		t.Errorf("%d consumers started by the plateau's end (%d OOM-killed), want 25", started(cur), ooms(cur))
	}
	_, scrape := get(t, d.url+"/metrics")
	for _, want := range []string{`thrashscope_run_info{preset="e4",run_id="` + rec.ID + `"} 1`, "thrashscope_run_consumers_planned 25",
		`comm="consumer-24"`, `thrashscope_run_write_cycles_total{consumer="consumer-00"}`, "thrashscope_run_write_cycle_duration_seconds_bucket"} {
		if !strings.Contains(scrape, want) {
			t.Errorf("scrape during the plateau lacks %s", want)
		}
	}

	waitFor(t, 2*time.Minute, "the run to end", func() bool { return !run.Active(d.record(t, rec.ID).State) })
	final := d.record(t, rec.ID)
	if final.State != run.StateCompleted || final.EndedAt == nil {
		t.Fatalf("run ended %s: %s", final.State, final.Reason)
	}
	var worst time.Duration
	var offPlan []string
	// A memcg this overcommitted can OOM with swap still free (reclaim runs
	// out of retries); the record must say so, not hide it.
	oomKilled := ooms(final)
	for _, c := range final.Consumers {
		if c.Exit == "oom-killed" && c.ActualStart == nil {
			continue // killed while it filled: it never started
		}
		if c.PID == 0 || c.ActualStart == nil || c.ActualEnd == nil || c.Cycles == 0 || (c.Exit != "ok" && c.Exit != "oom-killed") {
			t.Errorf("consumer %d incomplete: %+v", c.Index, c)
			continue
		}
		off := c.ActualStart.Sub(c.PlannedStart).Abs()
		worst = max(worst, off)
		if off > 100*time.Millisecond {
			offPlan = append(offPlan, fmt.Sprintf("consumer %d by %s", c.Index, off.Round(time.Millisecond)))
		}
	}
	t.Logf("schedule accuracy: worst start offset %s over %d consumers, over 100 ms: %v; %d OOM-killed", worst, len(final.Consumers), offPlan, oomKilled)
	// Consumers wait outside the thrashing cgroup, so only the host can make
	// one late: a stalled vCPU may, once; the plan's order (t_c = 1 s) must
	// hold whatever happens.
	if len(offPlan) > 1 || worst > 500*time.Millisecond {
		t.Errorf("consumers started off their plan: %v (worst %s); want at most one over 100 ms and none over 500 ms", offPlan, worst)
	}
	if oomKilled > len(final.Consumers)/5 {
		t.Errorf("%d of %d consumers were OOM-killed", oomKilled, len(final.Consumers))
	}
	if !gone(rec.Cgroup) {
		t.Errorf("run cgroup %s still exists", rec.Cgroup)
	}
	if left := alive(pidsOf(final)); len(left) > 0 {
		t.Errorf("consumers still alive: %v", left)
	}
	// Every cycle a consumer did reached the histogram, from the cycle
	// board, those of the OOM-killed too: it counts what the record counts.
	var recorded uint64
	for _, c := range final.Consumers {
		recorded += c.Cycles
	}
	_, scrape = get(t, d.url+"/metrics")
	if observed := scrapeValue(scrape, "thrashscope_run_write_cycle_duration_seconds_count"); observed != float64(recorded) {
		t.Errorf("the cycle histogram counts %.0f cycles, the record %d", observed, recorded)
	}

	code, b := d.do(t, "GET", "/api/v1/runs/"+rec.ID+"/samples.csv", "")
	if code != http.StatusOK {
		t.Fatalf("samples.csv: %d", code)
	}
	col, rows := readCSV(t, b)
	if len(rows) < 100 { // 60 s at 500 ms
		t.Errorf("samples.csv has %d rows, want a row per sample over 60 s", len(rows))
	}
	lo, hi := rec.Spec.Plateau()
	var peakSwapIn, peakStall, peakSome float64
	for _, r := range rows {
		el := time.Duration(r[col["elapsed_seconds"]] * float64(time.Second))
		if el < lo-10*time.Second || el > hi+10*time.Second {
			continue
		}
		peakSwapIn = max(peakSwapIn, r[col["swap_in_pages_per_second"]])
		peakStall = max(peakStall, r[col["consumer_stall_percent"]])
		peakSome = max(peakSome, r[col["pressure_some_percent"]])
	}
	t.Logf("around the plateau: peak swap-in %.0f pages/s, consumers' memory stall %.1f%% of a CPU, PSI some %.1f%%", peakSwapIn, peakStall, peakSome)
	if peakSwapIn <= 0 {
		t.Error("no swap-ins around the plateau")
	}
	if peakStall <= 0 && peakSome <= 0 {
		t.Error("no memory stall around the plateau")
	}
	// The rates the samples give add up to the kernel's own count of the
	// run's swap-ins (vmstat pswpin, read before the run and after it):
	// none more, and at most a tenth fewer, those before the first sample
	// and after the last.
	var summed float64
	for i := 1; i < len(rows); i++ {
		summed += rows[i][col["swap_in_pages_per_second"]] * (rows[i][col["elapsed_seconds"]] - rows[i-1][col["elapsed_seconds"]])
	}
	kernel := float64(hostSwapIns(t) - swapInsBefore)
	t.Logf("swap-ins: %.0f pages from the samples' rates, %.0f by the kernel over the run", summed, kernel)
	if summed > kernel*1.01+1 || summed < kernel*0.9 {
		t.Errorf("the samples' swap-in rates add up to %.0f pages, the kernel counted %.0f over the run: want no more, and at most a tenth fewer", summed, kernel)
	}
	saved, err := os.ReadFile(filepath.Join(d.dataDir, "runs", rec.ID, "samples.csv"))
	if err != nil || len(saved) < len(b)/2 {
		t.Errorf("saved samples.csv: %v (%d bytes)", err, len(saved))
	}
	if _, err := os.ReadFile(filepath.Join(d.dataDir, "runs", rec.ID, "record.json")); err != nil {
		t.Error(err)
	}
}

// hostSwapIns is /proc/vmstat's pswpin.
func hostSwapIns(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "pswpin "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("/proc/vmstat has no pswpin")
	return 0
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if strings.HasSuffix(url, "/metrics") {
		testenv.NoDuplicateSeries(t, string(b)) // in every scrape a test reads
	}
	return resp.StatusCode, string(b)
}

// TestRunAbortLeavesNothing: DELETE stops every consumer and removes the
// cgroup within 5 s, and the record says aborted.
func TestRunAbortLeavesNothing(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	d := startDaemon(t, t.TempDir())
	rec := d.startRun(t, `{"preset":"e4","scale":0.1,"lead_in":"1s"}`)
	waitFor(t, 15*time.Second, "three consumers", func() bool { return started(d.record(t, rec.ID)) >= 3 })
	pids := pidsOf(d.record(t, rec.ID))
	begin := time.Now()
	code, b := d.do(t, "DELETE", "/api/v1/runs/"+rec.ID, "")
	if code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, b)
	}
	waitFor(t, 5*time.Second, "consumers and cgroup gone", func() bool { return len(alive(pids)) == 0 && gone(rec.Cgroup) })
	t.Logf("abort cleaned up in %s", time.Since(begin).Round(time.Millisecond))
	final := d.record(t, rec.ID)
	if final.State != run.StateAborted || final.Reason == "" {
		t.Errorf("after abort: %s %q", final.State, final.Reason)
	}
	if code, _ := d.do(t, "DELETE", "/api/v1/runs/"+rec.ID, ""); code != http.StatusOK {
		t.Errorf("second DELETE: %d, want 200 (idempotent)", code)
	}
	if again := d.record(t, rec.ID); again.State != run.StateAborted || !again.EndedAt.Equal(*final.EndedAt) {
		t.Errorf("second DELETE changed the record: %+v", again)
	}
	// The slot is free again.
	if code, b := d.do(t, "POST", "/api/v1/runs", `{"preset":"e4","scale":0.1,"consumers":1,"lead_in":"0s"}`); code != http.StatusCreated {
		t.Errorf("a run after the abort: %d %s", code, b)
	}
}

// An observer stopped (SIGSTOP) for seconds in the middle of a run says so
// in the run's record: when, and for how long, within the stop as the
// test timed it.
func TestAPausedObserverIsRecorded(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	d := startDaemon(t, t.TempDir())
	rec := d.startRun(t, `{"preset":"e4","scale":0.05,"consumers":4,"interval":"1s","lead_in":"1s"}`)
	waitFor(t, 15*time.Second, "two consumers", func() bool { return started(d.record(t, rec.ID)) >= 2 })
	const stop = 5 * time.Second
	begin := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(stop)
	if err := d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(begin)
	waitFor(t, 2*time.Minute, "the run to end", func() bool { rec = d.record(t, rec.ID); return !run.Active(rec.State) })
	if len(rec.Pauses) != 1 {
		t.Fatalf("pauses %+v after a stop of %s, want one", rec.Pauses, stopped)
	}
	p := rec.Pauses[0]
	if p.Seconds < (stop-2*time.Second).Seconds() || p.Seconds > stopped.Seconds()+1 || p.At.Before(begin.Add(-2*time.Second)) || p.At.After(begin.Add(time.Second)) {
		t.Errorf("pause %+v, want about %s from about %s", p, stopped, begin)
	}
}

// TestObserverKilledMidRun: kill -9 of the observer takes its consumers
// with it (PDEATHSIG); a restarted observer removes the cgroup and marks
// the run aborted.
func TestObserverKilledMidRun(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	data := t.TempDir()
	d := startDaemon(t, data)
	rec := d.startRun(t, `{"preset":"e4","scale":0.1,"lead_in":"1s"}`)
	waitFor(t, 15*time.Second, "three consumers", func() bool { return started(d.record(t, rec.ID)) >= 3 })
	pids := pidsOf(d.record(t, rec.ID))
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d.cmd.Wait()
	waitFor(t, 5*time.Second, "the consumers to die with the observer", func() bool { return len(alive(pids)) == 0 })
	if gone(rec.Cgroup) {
		t.Fatal("the cgroup vanished without a restart; the test cannot show the clean-up")
	}

	d2 := startDaemon(t, data)
	final := d2.record(t, rec.ID)
	if final.State != run.StateAborted || !strings.Contains(final.Reason, "stopped mid-run") {
		t.Errorf("after restart: %s %q", final.State, final.Reason)
	}
	if !gone(rec.Cgroup) {
		t.Errorf("restarted observer left %s", rec.Cgroup)
	}
	if _, b := d2.do(t, "GET", "/api/v1/runs", ""); !strings.Contains(string(b), rec.ID) {
		t.Errorf("run list lacks %s: %s", rec.ID, b)
	}
}

// TestObserverKilledWithConsumersFrozen: kill -9 of the observer while
// binpack holds consumers frozen leaves none of them behind (a frozen task
// dies of its PDEATHSIG), and a restarted observer removes the run's
// freeze group.
func TestObserverKilledWithConsumersFrozen(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	data := t.TempDir()
	d := startDaemon(t, data)
	rec := d.startRun(t, `{"preset":"syn8","consumers":25,"cycles":300,"policy":"binpack"}`)
	unified, err := cgroup.OwnUnified("/proc")
	if err != nil {
		t.Fatal(err)
	}
	groups := filepath.Join(unified.Path, cgroup.Prefix+"run-"+rec.ID)
	if filepath.Dir(rec.Cgroup) == unified.Path {
		groups = rec.Cgroup // memory on v2: the run's own sub-cgroups freeze
	}
	var frozenPID int
	waitFor(t, 2*time.Minute, "a consumer frozen by binpack", func() bool {
		dirs, _ := filepath.Glob(filepath.Join(groups, cgroup.Prefix+"consumer-*"))
		for _, g := range dirs {
			if b, _ := os.ReadFile(filepath.Join(g, "cgroup.events")); strings.Contains(string(b), "frozen 1") {
				p, _ := os.ReadFile(filepath.Join(g, "cgroup.procs"))
				frozenPID, _ = strconv.Atoi(strings.TrimSpace(string(p)))
				return frozenPID > 0
			}
		}
		return false
	})
	pids := pidsOf(d.record(t, rec.ID))
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d.cmd.Wait()
	waitFor(t, 5*time.Second, "every consumer, the frozen ones too, to die with the observer", func() bool {
		return len(alive(append(pids, frozenPID))) == 0
	})
	d2 := startDaemon(t, data)
	if final := d2.record(t, rec.ID); final.State != run.StateAborted {
		t.Errorf("after restart: %s %q, want aborted", final.State, final.Reason)
	}
	if !gone(rec.Cgroup) || !gone(groups) {
		t.Errorf("restarted observer left %s or %s", rec.Cgroup, groups)
	}
}

// TestRunFailsWhenDisturbed: a run whose consumer is killed or stopped by
// someone else, or whose cgroup another process removes, ends at once as
// failed, with a reason that says what happened, and leaves nothing behind.
// (A run losing its consumers and cgroup to a second observer's start-up
// sweep used to run on and end "completed".)
func TestRunFailsWhenDisturbed(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	d := startDaemon(t, t.TempDir())
	for _, tc := range []struct {
		name, spec, want string
		disturb          func(t *testing.T, rec run.Record)
	}{
		{"SIGKILL", `{"preset":"e4","scale":0.1,"lead_in":"1s"}`, "consumer 1 (pid", func(t *testing.T, rec run.Record) {
			syscall.Kill(rec.Consumers[1].PID, syscall.SIGKILL)
		}},
		{"SIGTERM", `{"preset":"e4","scale":0.1,"lead_in":"1s"}`, "SIGTERM", func(t *testing.T, rec run.Record) {
			syscall.Kill(rec.Consumers[1].PID, syscall.SIGTERM)
		}},
		{"cgroup removed", `{"preset":"e4","scale":0.1,"lead_in":"30s"}`, "was removed", func(t *testing.T, rec run.Record) {
			// Its consumers' empty sub-cgroups first, as cgdelete -r would.
			groups, _ := filepath.Glob(filepath.Join(rec.Cgroup, cgroup.Prefix+"consumer-*"))
			for _, g := range append(groups, rec.Cgroup) {
				if err := os.Remove(g); err != nil {
					t.Fatalf("removing the idle run cgroup as an outsider would: %v", err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := d.startRun(t, tc.spec)
			if tc.name != "cgroup removed" {
				waitFor(t, 15*time.Second, "three consumers", func() bool { return started(d.record(t, rec.ID)) >= 3 })
				rec = d.record(t, rec.ID)
			}
			tc.disturb(t, rec)
			begin := time.Now()
			waitFor(t, 10*time.Second, "the run to end", func() bool { return !run.Active(d.record(t, rec.ID).State) })
			final := d.record(t, rec.ID)
			t.Logf("%s: ended %s after the disturbance: %s %q", tc.name, time.Since(begin).Round(time.Millisecond), final.State, final.Reason)
			if final.State != run.StateFailed || !strings.Contains(final.Reason, tc.want) {
				t.Errorf("state %s, reason %q; want failed, naming %q", final.State, final.Reason, tc.want)
			}
			waitFor(t, 5*time.Second, "consumers and cgroup gone", func() bool { return len(alive(pidsOf(d.record(t, rec.ID)))) == 0 && gone(rec.Cgroup) })
		})
	}
}

// TestRunRefusedOnAFullDisk: with --data.dir on a full file system a run
// is refused (507, naming the error) instead of starting with no record;
// nothing is left in the data directory, the failed write is counted, and
// once there is room again runs start.
func TestRunRefusedOnAFullDisk(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	data := t.TempDir()
	if err := unix.Mount("tmpfs", data, "tmpfs", 0, "size=4m,mode=0750"); err != nil {
		t.Fatalf("mounting a 4 MiB tmpfs as the data directory: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(data, unix.MNT_DETACH) })
	d := startDaemon(t, data)
	filler := filepath.Join(data, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the data directory: %v", err)
			}
			break
		}
	}
	f.Close()

	spec := `{"preset":"e4","scale":0.1,"consumers":1,"lead_in":"0s"}`
	code, b := d.do(t, "POST", "/api/v1/runs", spec)
	if code != http.StatusInsufficientStorage || !strings.Contains(string(b), "no space left on device") || strings.Contains(string(b), data) {
		t.Errorf("POST on a full disk: %d %s; want 507 naming the error, not the path", code, b)
	}
	if _, b := d.do(t, "GET", "/api/v1/runs", ""); string(b) != `{"runs":[]}`+"\n" {
		t.Errorf("GET /api/v1/runs after the refusal: %s; want no run", b)
	}
	if ents, err := os.ReadDir(filepath.Join(data, "runs")); err != nil || len(ents) != 0 {
		t.Errorf("the refused run left %v in runs/ (%v)", ents, err)
	}
	if _, scrape := get(t, d.url+"/metrics"); !strings.Contains(scrape, "thrashscope_run_record_write_errors_total 1\n") {
		t.Errorf("the failed write is not counted:\n%s", grepLines(scrape, "write_errors"))
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	rec := d.startRun(t, spec)
	if code, b := d.do(t, "DELETE", "/api/v1/runs/"+rec.ID, ""); code != http.StatusOK {
		t.Errorf("DELETE: %d %s", code, b)
	}
}

// TestRecordSavesAreCoalesced: 25 consumers starting and ending within a
// quarter second each (75 record changes) cost a save every 5 samples at
// most, not a save (and fsync) per change. Saves are counted by inotify: each is a
// rename onto record.json.
func TestRecordSavesAreCoalesced(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	d := startDaemon(t, t.TempDir())
	rec := d.startRun(t, `{"preset":"e4","scale":0.1,"interval":"10ms","lead_in":"2s"}`)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, filepath.Join(d.dataDir, "runs", rec.ID), unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	saves := 0
	count := func() {
		var buf [64 << 10]byte
		for {
			n, err := unix.Read(fd, buf[:])
			if n <= 0 || err != nil {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
				if name == "record.json" {
					saves++
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
	waitFor(t, 90*time.Second, "the run to end", func() bool { count(); return !run.Active(d.record(t, rec.ID).State) })
	// The final save follows the end: wait until the file says so.
	waitFor(t, 30*time.Second, "the ended record saved", func() bool {
		time.Sleep(50 * time.Millisecond)
		count()
		b, err := os.ReadFile(filepath.Join(d.dataDir, "runs", rec.ID, "record.json"))
		var saved run.Record
		return err == nil && json.Unmarshal(b, &saved) == nil && !run.Active(saved.State) && saved.EndedAt != nil
	})
	count()
	final := d.record(t, rec.ID)
	_, samples := get(t, d.url+"/api/v1/runs/"+rec.ID+"/samples.csv")
	rows := strings.Count(samples, "\n") - 1
	t.Logf("%d consumers started, %d ended; %d record saves over %d samples (%s)", started(final), len(final.Consumers), saves, rows, final.EndedAt.Sub(final.StartedAt).Round(time.Millisecond))
	if started(final) != 25 {
		t.Fatalf("%d consumers started, want 25 (state %s %q)", started(final), final.State, final.Reason)
	}
	if saves > rows/5+3 {
		t.Errorf("%d record saves for 75 changes over %d samples; want at most one in 5 samples, plus the start and the end", saves, rows)
	}
}

// grepLines keeps the lines of text that contain sub.
func grepLines(text, sub string) string {
	var out []string
	for l := range strings.Lines(text) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// TestRunBackingFile thrashes the page cache: the consumers' major faults
// are file faults, and the budget accepts it without swap. The run cgroup
// keeps its anon memory out of swap for backing=file, so the run is the
// same with swap on (as in CI) and off. The consumers write, so every page
// reclaimed must be written back first: reclaim is throttled on writeback
// and the consumers finish seconds late, as much later as the disk is
// slower. The test waits as long as the run itself may take.
func TestRunBackingFile(t *testing.T) {
	testenv.RequirePrivileged(t)
	spec := `{"preset":"e4","scale":0.1,"consumers":6,"lead_in":"1s","backing":"file","memory_limit_bytes":335544320}`
	s, err := run.DecodeSpec([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	r, err := run.Resolve(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(run.Host{MemTotalBytes: 24 << 30, MemAvailableBytes: 20 << 30, DiskFreeBytes: 10 << 30}); err != nil {
		t.Fatalf("the budget refuses backing=file without swap: %v", err)
	}
	d := startDaemon(t, t.TempDir(), "--probes=bpf")
	rec := d.startRun(t, spec)
	var fileFaults, anonFaults float64
	waitFor(t, r.Duration()+r.Grace()+30*time.Second, "the run to end", func() bool {
		_, scrape := get(t, d.url+"/metrics")
		f, a := consumerFaults(scrape)
		fileFaults, anonFaults = max(fileFaults, f), max(anonFaults, a)
		time.Sleep(200 * time.Millisecond)
		return !run.Active(d.record(t, rec.ID).State)
	})
	final := d.record(t, rec.ID)
	var late []string
	for _, c := range final.Consumers {
		late = append(late, fmt.Sprintf("%.1f s", c.LatenessSeconds))
	}
	t.Logf("consumers' major faults: file %.0f, anon %.0f; lateness %s", fileFaults, anonFaults, strings.Join(late, ", "))
	if fileFaults < 100 || anonFaults > fileFaults/10 {
		t.Errorf("file-backed consumers took %.0f file and %.0f anon major faults, want a thrash of file faults", fileFaults, anonFaults)
	}
	if final.State != run.StateCompleted {
		t.Errorf("run %s: %s", final.State, final.Reason)
	}
	if ents, _ := os.ReadDir(filepath.Join(d.dataDir, "scratch")); len(ents) != 0 {
		t.Errorf("backing files left in scratch: %v", ents)
	}
}

// scrapeValue is the value of the first sample named name in a scrape, or
// -1 when there is none.
func scrapeValue(scrape, name string) float64 {
	for line := range strings.Lines(scrape) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return -1
}

// consumerFaults sums the consumers' major faults by kind in a scrape.
func consumerFaults(scrape string) (file, anon float64) {
	sc := bufio.NewScanner(strings.NewReader(scrape))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "thrashscope_process_major_faults_total{") || !strings.Contains(line, `comm="consumer-`) {
			continue
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		switch {
		case strings.Contains(line, `kind="file"`):
			file += v
		case strings.Contains(line, `kind="anon"`):
			anon += v
		}
	}
	return file, anon
}

// TestRunBadSpecs: each bad request gets its status and a message that
// names the problem.
func TestRunBadSpecs(t *testing.T) {
	testenv.RequirePrivileged(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("s3cret\n"), 0o600)
	d := startDaemon(t, filepath.Join(dir, "data"), "--web.api-token-file="+token)
	cases := []struct {
		body, auth string
		code       int
		says       string
	}{
		{`{"preset":"e4","scale":0.1}`, "", http.StatusUnauthorized, "Bearer"},
		{`{"preset":"e4","scale":0.1}`, "Bearer wrong", http.StatusUnauthorized, "Bearer"},
		{`{"preset":"e9"}`, "Bearer s3cret", http.StatusBadRequest, "preset"},
		{`{"preset":"e4","consumers":513}`, "Bearer s3cret", http.StatusBadRequest, "consumers"},
		{`{"preset":"e4","interval":"10m"}`, "Bearer s3cret", http.StatusBadRequest, "interval"},
		{`{"preset":"e4","sleep":"soon"}`, "Bearer s3cret", http.StatusBadRequest, "sleep"},
		{`{"preset":"e4","scale":0.1,"extra":1}`, "Bearer s3cret", http.StatusBadRequest, "extra"},
		{`{"preset":"e4","scale":60}`, "Bearer s3cret", http.StatusUnprocessableEntity, "memory_limit_bytes"},
		{`{"preset":"e4","consumers":500,"size_bytes":1073741824,"memory_limit_bytes":1073741824}`, "Bearer s3cret", http.StatusUnprocessableEntity, "OOM"},
	}
	if b, _ := os.ReadFile("/proc/swaps"); strings.Count(string(b), "\n") < 2 {
		cases = append(cases, struct {
			body, auth string
			code       int
			says       string
		}{`{"preset":"e4","scale":0.1}`, "Bearer s3cret", http.StatusUnprocessableEntity, "no swap"})
	}
	for _, c := range cases {
		req, _ := http.NewRequest("POST", d.url+"/api/v1/runs", strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Error string }
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != c.code || !strings.Contains(e.Error, c.says) {
			t.Errorf("%s (%s): %d %s, want %d naming %q", c.body, c.auth, resp.StatusCode, b, c.code, c.says)
		}
		if strings.Contains(string(b), "s3cret") {
			t.Errorf("response echoes the token: %s", b)
		}
	}
	if code, b := d.do(t, "GET", "/api/v1/runs", ""); code != http.StatusOK || strings.Contains(string(b), `"id"`) {
		t.Errorf("refused specs left runs behind: %d %s", code, b)
	}
}

// A small run over the API, in a limit its consumers overrun by half, keeps
// every consumer to its end, the OOM guard reclaiming for them where the
// kernel would kill one (cgroup v2 has no OOM-kill switch: the guard holds
// memory.high a slack under memory.max), and leaves nothing behind. What
// make test-kernels runs on each kernel: function, not speed.
func TestRunKeepsEveryConsumer(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	d := startDaemon(t, t.TempDir())
	// 6 × 5 MB in 20 MiB, a consumer every 2 s.
	rec := d.startRun(t, `{"preset":"e4","consumers":6,"scale":0.05,"memory_limit_bytes":419430400,"interval":"2s","lead_in":"2s"}`)
	own, err := cgroup.Own("/proc")
	if err != nil {
		t.Fatal(err)
	}
	cg, err := cgroup.Open(rec.Cgroup, own.V2)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cg.MemoryLimit(); err != nil || got != rec.Spec.MemoryLimitBytes {
		t.Errorf("cgroup limit %d (%v), want %d", got, err, rec.Spec.MemoryLimitBytes)
	}
	if own.V2 {
		high, _ := os.ReadFile(filepath.Join(rec.Cgroup, "memory.high"))
		if n, err := strconv.ParseInt(strings.TrimSpace(string(high)), 10, 64); err != nil || n >= rec.Spec.MemoryLimitBytes {
			t.Errorf("memory.high %q under the OOM guard, want below memory.max %d", high, rec.Spec.MemoryLimitBytes)
		}
	}
	waitFor(t, 3*time.Minute, "the run to end", func() bool { return !run.Active(d.record(t, rec.ID).State) })
	final := d.record(t, rec.ID)
	if final.State != run.StateCompleted {
		t.Fatalf("run ended %s: %s", final.State, final.Reason)
	}
	for _, c := range final.Consumers {
		if c.Exit != "ok" || c.Cycles == 0 || c.ActualStart == nil {
			t.Errorf("consumer %d: exit %q after %d cycles (started %v), want every consumer to its end", c.Index, c.Exit, c.Cycles, c.ActualStart != nil)
		}
	}
	testenv.Figure(t, "small run", "%d consumers to their end, %d OOM rescues", len(final.Consumers), final.OOMRescues)
	if !gone(rec.Cgroup) {
		t.Errorf("run cgroup %s still exists", rec.Cgroup)
	}
	if left := alive(pidsOf(final)); len(left) > 0 {
		t.Errorf("consumers still alive: %v", left)
	}
}
