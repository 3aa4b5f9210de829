package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func TestObserverLifecycle(t *testing.T) {
	t.Setenv(fakeObserverEnv, "ready")
	o, err := startObserver(context.Background(), testBinary(t), "auto", 10*time.Second, 0, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	s, err := startSelfCost("/proc", o.pid())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	c, err := s.finish()
	if err != nil {
		t.Fatal(err)
	}
	if c.RSSKiB == 0 || c.HWMKiB < c.RSSKiB || c.Seconds <= 0 {
		t.Errorf("self-cost of a live process = %+v", c)
	}
	if err := o.alive(); err != nil {
		t.Fatal(err)
	}
	if err := o.stop(5*time.Second, quietLogger()); err != nil {
		t.Fatal(err)
	}
	if err := o.alive(); err == nil {
		t.Error("alive after stop")
	}
}

func TestObserverStartFailures(t *testing.T) {
	tests := []struct {
		mode string
		want string
	}{
		{"crash", "loading objects: operation not permitted"},
		{"unready", "did not answer 200 within"},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			t.Setenv(fakeObserverEnv, tt.mode)
			_, err := startObserver(context.Background(), testBinary(t), "auto", time.Second, 0, quietLogger())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestTailBuffer(t *testing.T) {
	b := newTailBuffer(8)
	io.WriteString(b, "first line\n")
	io.WriteString(b, "last\n")
	if got := b.String(); got != "  ne\n  last" {
		t.Errorf("tail = %q", got)
	}
	if got := newTailBuffer(8).String(); got != "  (no output)" {
		t.Errorf("empty tail = %q", got)
	}
}

// fakeBPFStats stands in for the kernel's statistics: every reading adds
// 1000 runs of 50 µs each to memory_stall.
type fakeBPFStats struct {
	reads  uint64
	closed bool
}

func (f *fakeBPFStats) snapshot() (countersSnapshot, error) {
	f.reads++
	return countersSnapshot{7: {Name: "memory_stall", Runs: f.reads * 1000, RunTimeNs: f.reads * 50e6}}, nil
}

func (f *fakeBPFStats) Close() error {
	f.closed = true
	return nil
}

// The whole plan against the fake observer: interleaved rounds, self-cost,
// BPF attribution and targets, in well under a second.
func TestBenchRunWithFakeObserver(t *testing.T) {
	t.Setenv(fakeObserverEnv, "ready")
	exe := testBinary(t)
	b := &bench{
		cfg: config{
			ObserverBin:  exe,
			Rounds:       2,
			Duration:     100 * time.Millisecond,
			Settle:       0,
			ReadyTimeout: 10 * time.Second,
			StopTimeout:  5 * time.Second,
			Workloads:    []string{"faults", "ctxswitch"},
			ProcRoot:     "/proc",
			Exe:          exe,
		},
		logger:         quietLogger(),
		ticksPerSecond: clockTicksPerSecond(),
	}
	var opened []*fakeBPFStats
	b.openBPFStats = func(procRoot string, pid int, _ *slog.Logger) (bpfStats, error) {
		f := &fakeBPFStats{}
		opened = append(opened, f)
		return f, nil
	}
	rep, err := b.run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Idle == nil || len(rep.Workloads) != 2 {
		t.Fatalf("report = %+v", rep)
	}
	for _, w := range rep.Workloads {
		if len(w.BaselineOps) != 2 || len(w.ObservedOps) != 2 || w.Comparison == nil || w.Observer == nil || w.Observer.RSSMiB <= 0 {
			t.Errorf("%s: %+v", w.Name, w)
		}
		if w.Paired == nil || len(w.Paired.Ratios) != 2 {
			t.Errorf("%s: paired = %+v", w.Name, w.Paired)
		}
		// One window: 50 ms of BPF over a ~100 ms window is about 50%.
		if a := w.BPF; a == nil || a.Windows != 2 || len(a.Programs) != 1 || a.Programs[0].Runs != 2000 ||
			a.AttributedPercent < 20 || a.AttributedPercent > 55 {
			t.Errorf("%s: bpf = %+v", w.Name, w.BPF)
		}
	}
	if len(opened) != 4 {
		t.Errorf("BPF statistics opened %d times, want once per observed phase (4)", len(opened))
	}
	for i, f := range opened {
		if f.reads != 2 || !f.closed {
			t.Errorf("BPF statistics %d: read %d times (want 2), closed %v", i, f.reads, f.closed)
		}
	}
	if len(rep.Targets) != 2+2+3+1 {
		t.Errorf("%d targets, want 8", len(rep.Targets))
	}
}
