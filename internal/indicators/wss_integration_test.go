package indicators

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// TestWorkingSetAccuracy checks W(t, τ) against consumers whose writes we
// count. A consumer does k uniform random one-byte writes over P pages within
// a window, so it touches P·(1 − e^(−k/P)) distinct pages of its region.
//
// smaps_rollup is the whole process, and each τ the consumer's Go runtime
// (text, stacks, timers, the report pipe) references pages of its own. We
// keep the figure the product reports and account for the runtime with a
// third consumer that runs the same cycles with one write each: its estimate
// less its region's expected pages is the runtime's share, measured on the
// same binary doing the same cycles, and we subtract it. A fixed guess would
// drift with the Go version, and a larger S would only hide it. As a
// cross-check, each window also reads the region's own VMA in
// /proc/<pid>/smaps just before the scan, and logs that figure (which has no
// runtime in it) beside the estimate.
//
// There is no memory pressure (no cgroup limit), so reclaim does not clear
// accessed bits behind our back, and without it each cycle is short: a
// cycle's writes land within a millisecond or so, and counting the cycles
// reported within a window is exact but for the rare one astride its edge.
//
// The demand (the working set in the process's own time) is held to the
// same bound: the real probe reads each consumer's stall, which without
// pressure is next to none, so the demand must not drift from W.
func TestWorkingSetAccuracy(t *testing.T) {
	testenv.RequirePrivileged(t)
	bin := testenv.Binary(t, "loadgen")
	const (
		size    = 64 << 20
		sleep   = 100 * time.Millisecond
		tau     = time.Second
		windows = 8
		maxErr  = 0.15
	)
	page := uint64(os.Getpagesize())
	pages := float64(size / page)
	expected := func(k int64) float64 { return pages * (1 - math.Exp(-float64(k)/pages)) * float64(page) }

	rates := []struct {
		name   string
		writes int
	}{{"baseline", 1}, {"W=2000", 2000}, {"W=20000", 20000}}
	cons := make([]*wssConsumer, len(rates))
	for i, r := range rates {
		cons[i] = startWSSConsumer(t, bin, consumer.Config{
			Index: i, Mode: consumer.ModeCycles, Size: size, Writes: r.writes, Sleep: sleep,
			Start: time.Now(), End: time.Now().Add(30 * time.Second),
			Backing: run.BackingAnon, Fill: run.FillRandom, ParentPID: os.Getpid(),
		})
	}
	pids := make([]int, len(cons))
	for i, c := range cons {
		c.waitFilled(t, 20*time.Second)
		pids[i] = c.pid
	}

	p, err := probe.Load(probe.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	stall := func(pid int) (time.Duration, bool) {
		s, ok := p.StallOf(uint32(pid))
		return s.Total(), ok
	}
	service := func(pid int) (time.Duration, bool) { return p.FaultServiceOf(uint32(pid)) }
	w := NewWorkingSet(WorkingSetConfig{ProcfsPath: "/proc", Interval: tau, Stall: stall, FaultService: service})
	if err := w.ScanOnce(pids); err != nil { // opens the first window
		t.Fatal(err)
	}
	type reading struct {
		est      WorkingSetEstimate
		region   uint64    // the region VMA's Referenced, read just before the scan
		regionAt time.Time // when
	}
	got := make([][]reading, len(cons))
	tick := time.NewTicker(tau)
	defer tick.Stop()
	irregular := 0 // windows flagged, over all consumers
	for range windows {
		<-tick.C
		rs := make([]reading, len(cons))
		for i, c := range cons {
			t0 := time.Now()
			ref, err := regionReferenced(c.pid, size)
			if err != nil {
				t.Fatal(err)
			}
			rs[i].region, rs[i].regionAt = ref, midpoint(t0, time.Now())
		}
		if err := w.ScanOnce(pids); err != nil {
			t.Fatal(err)
		}
		for i, c := range cons {
			e, ok := w.Estimate(c.pid)
			if !ok {
				t.Fatalf("%s (pid %d): no estimate after a full window", rates[i].name, c.pid)
			}
			if e.Irregular {
				// A late tick on a busy host: the estimate is still
				// checked below against the writes in its own window.
				irregular++
				t.Logf("%s: window %v flagged irregular with τ %v", rates[i].name, e.Window(), tau)
			}
			rs[i].est = e
			got[i] = append(got[i], rs[i])
		}
	}
	// The flag must be rare, not absent: every window is τ apart but for a
	// late tick, and one late tick flags two windows of each consumer.
	if limit := 2 * len(cons) * 2; irregular > limit {
		t.Errorf("%d of %d windows flagged irregular with τ %v, want at most %d (two late ticks)", irregular, windows*len(cons), tau, limit)
	}
	// Every cycle that ended in the last window has reported once each
	// consumer has reported one that began after it (reports come in order).
	var lastEnd time.Time
	for i := range got {
		for _, r := range got[i] {
			lastEnd = maxTime(lastEnd, r.est.To)
		}
	}
	for _, c := range cons {
		c.waitCycleAfter(t, lastEnd, 10*time.Second)
	}

	// The runtime's share, from the baseline consumer.
	var runtime []float64
	for _, r := range got[0] {
		runtime = append(runtime, float64(r.est.Bytes)-expected(cons[0].writesIn(r.est.From, r.est.To)))
	}
	share := median(runtime)
	t.Logf("runtime share (baseline estimate less its region's expected pages): median %.0f KiB, windows %s", share/1024, kib(runtime))
	if float64(got[0][0].est.Bytes) > size/10 {
		t.Errorf("baseline consumer: %d KiB referenced in a window while writing about %d pages: were the accessed bits cleared?",
			got[0][0].est.Bytes>>10, cons[0].writesIn(got[0][0].est.From, got[0][0].est.To))
	}

	for i := 1; i < len(cons); i++ {
		var errs, demandErrs, regionErrs, measured, exp, rt []float64
		for _, r := range got[i] {
			k := cons[i].writesIn(r.est.From, r.est.To)
			want := expected(k)
			m := float64(r.est.Bytes) - share
			measured, exp = append(measured, m), append(exp, want)
			errs = append(errs, m/want-1)
			demandErrs = append(demandErrs, (float64(r.est.DemandBytes)-share)/want-1)
			if !r.est.HasStall {
				t.Errorf("%s: an estimate without the stalled share, with the probe running", rates[i].name)
			}
			regionWant := expected(cons[i].writesIn(r.est.From, r.regionAt))
			regionErrs = append(regionErrs, float64(r.region)/regionWant-1)
			rt = append(rt, float64(r.est.Bytes)-float64(r.region))
			t.Logf("%s: window %.3fs k=%d expected %.0f KiB estimate %d KiB less runtime %.0f KiB (error %+.1f%%); region VMA %d KiB (error %+.1f%%)",
				rates[i].name, r.est.Window().Seconds(), k, want/1024, r.est.Bytes>>10, m/1024, 100*(m/want-1), r.region>>10, 100*regionErrs[len(regionErrs)-1])
		}
		e := median(errs)
		t.Logf("%s over %d windows (median): expected %.0f KiB, measured %.0f KiB, error %+.1f%%; region VMA alone error %+.1f%%; estimate less region %.0f KiB (the runtime share seen directly)",
			rates[i].name, windows, median(exp)/1024, median(measured)/1024, 100*e, 100*median(regionErrs), median(rt)/1024)
		if math.Abs(e) > maxErr {
			t.Errorf("%s: median error %+.1f%%, want within ±%.0f%%", rates[i].name, 100*e, 100*maxErr)
		}
		de := median(demandErrs)
		t.Logf("%s: demand median error %+.1f%%", rates[i].name, 100*de)
		if math.Abs(de) > maxErr {
			t.Errorf("%s: demand median error %+.1f%%, want within ±%.0f%%", rates[i].name, 100*de, 100*maxErr)
		}
	}
}

// wssConsumer is a `loadgen consume` process started the way the master
// starts one, with the cycles it reported and when they arrived.
type wssConsumer struct {
	pid    int
	filled chan struct{} // closed at the Started report

	mu     sync.Mutex
	cycles []wssCycle
	err    error
}

type wssCycle struct {
	at     time.Time // the middle of its writes: arrival less half their duration
	writes int64
}

func startWSSConsumer(t *testing.T, bin string, cfg consumer.Config) *wssConsumer {
	t.Helper()
	repR, repW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, cfg.Args()...)
	cmd.ExtraFiles = []*os.File{repW}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ctl, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	repW.Close()
	c := &wssConsumer{pid: cmd.Process.Pid, filled: make(chan struct{})}
	read := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-read // EOF once it is dead
		_ = cmd.Wait()
		ctl.Close()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("consumer %d stderr: %s", cfg.Index, stderr.String())
		}
	})
	go func() {
		defer close(read)
		defer repR.Close()
		for {
			rep, err := consumer.ReadMessage(repR)
			now := time.Now()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					c.fail(err)
				}
				return
			}
			switch rep.Kind {
			case consumer.KindStarted:
				if rep.B != 0 {
					close(c.filled)
				}
			case consumer.KindCycle:
				c.mu.Lock()
				c.cycles = append(c.cycles, wssCycle{at: now.Add(-rep.Duration() / 2), writes: rep.A})
				c.mu.Unlock()
			case consumer.KindError:
				c.fail(fmt.Errorf("consumer %d failed (errno %d)", cfg.Index, rep.A))
			}
		}
	}()
	if _, err := ctl.Write([]byte{'g'}); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *wssConsumer) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

func (c *wssConsumer) waitFilled(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-c.filled:
	case <-time.After(timeout):
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("consumer %d did not fill its region within %v (err %v)", c.pid, timeout, c.err)
	}
}

// waitCycleAfter waits until c has reported a cycle whose writes were
// under way after at.
func (c *wssConsumer) waitCycleAfter(t *testing.T, at time.Time, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(10 * time.Millisecond) {
		c.mu.Lock()
		n := len(c.cycles)
		done := n > 0 && c.cycles[n-1].at.After(at)
		err := c.err
		c.mu.Unlock()
		if done {
			return
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("consumer %d reported no cycle after %s within %v (err %v)", c.pid, at.Format("15:04:05.000"), timeout, err)
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// writesIn is the writes of the cycles done within (from, to].
func (c *wssConsumer) writesIn(from, to time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var k int64
	for _, cy := range c.cycles {
		if cy.at.After(from) && !cy.at.After(to) {
			k += cy.writes
		}
	}
	return k
}

// regionReferenced is the Referenced of pid's one mapping of at least size
// bytes with huge pages off: a consumer's region.
func regionReferenced(pid int, size uint64) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var found []uint64
	var big bool
	var ref uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := testenv.VMARange(line); ok {
			big, ref = hi-lo >= size, 0
			continue
		}
		if v, ok := strings.CutPrefix(line, "Referenced:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("smaps: %q: %w", line, err)
			}
			ref = n << 10
		}
		if big && strings.HasPrefix(line, "VmFlags:") && slices.Contains(strings.Fields(line), "nh") {
			found = append(found, ref)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("pid %d has %d mappings of %d bytes or more with huge pages off, want the consumer's one region", pid, len(found), size)
	}
	return found[0], nil
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func kib(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x/1024, 'f', 0, 64)
	}
	return "[" + strings.Join(parts, " ") + "] KiB"
}
