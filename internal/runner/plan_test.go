package runner

import (
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
)

// TestLogWriterKeepsTheLastLine: the reason a run fails with names a
// consumer's last error line, valid UTF-8 and bounded, not all it wrote.
func TestLogWriterKeepsTheLastLine(t *testing.T) {
	w := &logWriter{l: slog.New(slog.DiscardHandler)}
	if w.Last() != "" {
		t.Fatalf("before any write: %q", w.Last())
	}
	w.Write([]byte("first\n"))
	w.Write([]byte("loadgen: joining the run cgroup at the planned start: write 0: no such device\n\n"))
	if got, want := w.Last(), "loadgen: joining the run cgroup at the planned start: write 0: no such device"; got != want {
		t.Errorf("Last() = %q, want %q", got, want)
	}
	w.Write([]byte("a\nb\xc3\n"))
	if got := w.Last(); got != "b\uFFFD" {
		t.Errorf("Last() = %q, want the last line, made valid", got)
	}
	w.Write([]byte(strings.Repeat("é", 400)))
	if got := w.Last(); len(got) > maxReasonLine+len("…") || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "éé") {
		t.Errorf("a long line is kept as %d bytes: %q", len(got), got)
	}
}

// TestLogWriterNamesACrash: when a consumer's Go runtime crashes, the
// reason is the line that says why (its first), not the last line of a
// goroutine's stack; the crash output comes in chunks, as from a pipe.
func TestLogWriterNamesACrash(t *testing.T) {
	w := &logWriter{l: slog.New(slog.DiscardHandler)}
	w.Write([]byte("loadgen: consumer 7 started\n"))
	w.Write([]byte("fatal error: runtime: cannot allocate memory\n\nruntime stack:\nruntime.throw({0x7a1000, 0x1d})\n"))
	w.Write([]byte("goroutine 1 [running]:\nmain.main()\n\t/src/cmd/loadgen/main.go:82 +0x2e89\n"))
	w.Write([]byte("panic: a later one\n"))
	if got, want := w.Last(), "fatal error: runtime: cannot allocate memory"; got != want {
		t.Errorf("Last() = %q, want the crash's first line %q", got, want)
	}
	plain := &logWriter{l: slog.New(slog.DiscardHandler)}
	plain.Write([]byte("loadgen: the fatal error: of a message that does not begin with it\n"))
	if got := plain.Last(); !strings.HasPrefix(got, "loadgen:") {
		t.Errorf("a line that is no crash: Last() = %q", got)
	}
}

// TestLogWriterReadsAConsumersPipe: a consumer's stderr is read from its
// pipe to the end, and Last waits for that end, so the reason a run fails
// with has the last line the consumer printed before it exited.
func TestLogWriterReadsAConsumersPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	lw := &logWriter{l: slog.New(slog.DiscardHandler), done: make(chan struct{})}
	go lw.copyFrom(r)
	go func() {
		defer w.Close()
		_, _ = w.Write([]byte(strings.Repeat("x", 10000) + "\n")) // past the 4 KB buffer
		time.Sleep(20 * time.Millisecond)
		_, _ = w.Write([]byte("loadgen: touching the region: cannot allocate memory\n"))
	}()
	if got, want := lw.Last(), "loadgen: touching the region: cannot allocate memory"; got != want {
		t.Errorf("Last() = %q, want %q", got, want)
	}
}

func TestMakespan(t *testing.T) {
	at := func(s int) *time.Time {
		v := time.Unix(1000+int64(s), 0)
		return &v
	}
	cs := []run.ConsumerRecord{
		{ActualStart: at(10), ActualEnd: at(50)},
		{ActualStart: at(5), ActualEnd: at(40)},
		{ActualStart: at(20), ActualEnd: at(70)},
	}
	if got := makespan(cs); got != 65 {
		t.Errorf("makespan %g, want 65 (first start 5 s to last end 70 s)", got)
	}
	cs[1].ActualEnd = nil
	if got := makespan(cs); got != 0 {
		t.Errorf("makespan %g with a consumer not ended, want 0", got)
	}
}

// A consumer the policy does not hold fails the run when it is seen stopped
// twice in a row, or when its cycles, CPU time and faults stay put for
// stuckAfter; held (frozen), it never does.
func TestProgressCheck(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	running := procfs.Process{State: 'S', UserSeconds: 1, MinorFaults: 10}
	stopped := running
	stopped.State = 'T'
	w := watched{index: 3, pid: 42, cycles: 7}
	cases := []struct {
		name  string
		steps []procfs.Process
		held  bool
		at    []time.Duration
		want  string // in the reason of the last step; "" for none
	}{
		{"stopped once", []procfs.Process{running, stopped}, false, []time.Duration{0, time.Second}, ""},
		{"stopped twice", []procfs.Process{running, stopped, stopped}, false, []time.Duration{0, time.Second, 2 * time.Second}, "consumer 3 (pid 42) was stopped (state T)"},
		{"stopped, then running again", []procfs.Process{stopped, running, stopped}, false, []time.Duration{0, time.Second, 2 * time.Second}, ""},
		{"traced", []procfs.Process{func() procfs.Process { p := running; p.State = 't'; return p }(), func() procfs.Process { p := running; p.State = 't'; return p }()}, false, []time.Duration{0, time.Second}, "state t"},
		{"held and stopped", []procfs.Process{stopped, stopped, stopped}, true, []time.Duration{0, time.Second, 2 * time.Second}, ""},
		{"quiet under the bound", []procfs.Process{running, running}, false, []time.Duration{0, stuckAfter - time.Second}, ""},
		{"stuck", []procfs.Process{running, running}, false, []time.Duration{0, stuckAfter}, "made no progress for 5m0s"},
		{"faulting is progress", []procfs.Process{running, func() procfs.Process { p := running; p.MajorFaults++; return p }()}, false, []time.Duration{0, stuckAfter}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &progress{pid: 42, since: t0}
			ww := w
			ww.held = tc.held
			var got string
			for i, p := range tc.steps {
				got = st.check(ww, p, t0.Add(tc.at[i]))
				if got != "" && i < len(tc.steps)-1 {
					t.Fatalf("step %d failed the run early: %s", i, got)
				}
			}
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// A run's record starts with each consumer planned on the schedule; the
// fill's consumers are planned from the start until the run's longest.
func TestPlannedRecord(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		spec string
		want func(i int, s run.Slot) (time.Time, time.Time)
	}{
		{`{"preset":"e4","scale":0.1}`, func(_ int, s run.Slot) (time.Time, time.Time) { return start.Add(s.Start), start.Add(s.End) }},
		{`{"preset":"syn8","consumers":3}`, func(_ int, s run.Slot) (time.Time, time.Time) { return start.Add(s.Start), start.Add(s.End) }},
		{`{"preset":"fill","memory_limit_bytes":1073741824}`, func(int, run.Slot) (time.Time, time.Time) { return start, start.Add(run.MaxRunDuration) }},
	} {
		spec, err := run.DecodeSpec([]byte(tc.spec))
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.Resolve(spec)
		if err != nil {
			t.Fatal(err)
		}
		rec := plannedRecord(execConfig{ID: "x", Spec: res}, strategyOf(res), start, "/cg", ProtectMlock)
		if rec.State != run.StateRunning || !rec.StartedAt.Equal(start) || rec.Cgroup != "/cg" || rec.Protection != ProtectMlock {
			t.Errorf("%s: record %+v", tc.spec, rec)
		}
		if len(rec.Consumers) != res.Processes() {
			t.Fatalf("%s: %d consumers planned, want %d", tc.spec, len(rec.Consumers), res.Processes())
		}
		for i, c := range rec.Consumers {
			from, to := tc.want(i, res.Slot(i))
			if c.Index != i || !c.PlannedStart.Equal(from) || !c.PlannedEnd.Equal(to) {
				t.Errorf("%s: consumer %d planned %v-%v, want %v-%v", tc.spec, i, c.PlannedStart, c.PlannedEnd, from, to)
			}
		}
	}
}
