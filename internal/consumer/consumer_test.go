package consumer

import (
	"bufio"
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

const testMiB = 1 << 20

func cyclesConfig(size int64, writes int, sleep time.Duration, end time.Time) Config {
	return Config{
		Mode: ModeCycles, Size: size, Writes: writes, Sleep: sleep, End: end,
		Backing: run.BackingAnon, Fill: run.FillRandom,
	}
}

func TestConsumerArgsRoundTrip(t *testing.T) {
	for _, c := range []Config{
		{
			Index: 7, Mode: ModeCycles, Size: 100_000_000, Writes: 10_000, Sleep: 100 * time.Millisecond,
			Start: time.Unix(0, 1_700_000_010_000_000_001), End: time.Unix(0, 1_700_000_060_000_000_000),
			Backing: run.BackingFile, FileDir: "/var/lib/thrashscope dir", Fill: run.FillZero, ParentPID: 4242, Join: true, Cycles: 500,
		},
		{
			Index: 0, Mode: ModeFill, Size: 128 << 20, Start: time.Unix(0, 1_700_000_000_000_000_000),
			Backing: run.BackingAnon, Fill: run.FillRandom, Chunks: 12, Repeats: 5, HotInterval: 5 * time.Millisecond,
		},
	} {
		got, err := ParseArgs(c.Args())
		if err != nil {
			t.Fatalf("ParseArgs(%q): %v", c.Args(), err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %q\n got %+v\nwant %+v", c.Args(), got, c)
		}
	}
}

func TestParseConsumerArgsErrors(t *testing.T) {
	good := cyclesConfig(4*testMiB, 1000, 0, time.Unix(0, 1_700_000_000_000_000_000)).Args()
	// with replaces flags in the good args (kingpin refuses repeats).
	with := func(flags ...string) []string {
		args := slices.Clone(good)
		for _, f := range flags {
			name, _, _ := strings.Cut(f, "=")
			i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, name+"=") })
			if i < 0 {
				args = append(args, f)
			} else {
				args[i] = f
			}
		}
		return args
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", with("--bogus=1"), "bogus"},
		{"bad mode", with("--mode=thrash"), "thrash"},
		{"bad backing", with("--backing=disk"), "disk"},
		{"tiny size", with("--size=100"), "--size=100"},
		{"no writes", with("--writes=0"), "--writes=0"},
		{"no end", with("--end=0"), "--end"},
		{"bad time", with("--start=soon"), "unix nanoseconds"},
		{"fill without chunks", with("--mode=fill", "--repeats=1"), "--chunks=0"},
		{"not consume", []string{"run"}, "run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseArgs(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := ParseArgs(good); err != nil {
		t.Fatalf("the good args: %v", err)
	}
}

// consumeRun is Consume running in a goroutine, with pipes as the master
// would give it.
type consumeRun struct {
	cancel  context.CancelFunc
	ctl     *os.File // the master's end of the control pipe
	reports chan Message
	err     chan error
}

func startConsume(t *testing.T, cfg Config, sendGo bool) *consumeRun {
	t.Helper()
	return startConsumeJoining(t, cfg, sendGo, nil)
}

// startConsumeJoining is startConsume with join as the cgroup.procs the
// consumer joins through.
func startConsumeJoining(t *testing.T, cfg Config, sendGo bool, join io.Writer) *consumeRun {
	t.Helper()
	return startConsumeLogged(t, cfg, sendGo, join, nil)
}

// startConsumeLogged is startConsumeJoining with the cycles logged on log.
func startConsumeLogged(t *testing.T, cfg Config, sendGo bool, join io.Writer, log *CycleLog) *consumeRun {
	t.Helper()
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &consumeRun{cancel: cancel, ctl: ctlW, reports: make(chan Message, 1024), err: make(chan error, 1)}
	t.Cleanup(func() {
		cancel()
		ctlW.Close()
		ctlR.Close()
	})
	if sendGo {
		if _, err := ctlW.Write([]byte{'g'}); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		err := ConsumeLogged(ctx, cfg, ctlR, repW, join, log)
		repW.Close()
		r.err <- err
	}()
	go func() {
		defer repR.Close()
		defer close(r.reports)
		for {
			rep, err := ReadMessage(repR)
			if err != nil {
				if err != io.EOF {
					t.Errorf("reading reports: %v", err)
				}
				return
			}
			r.reports <- rep
		}
	}()
	return r
}

// next waits for the next report of the given kind, skipping others.
func (r *consumeRun) next(t *testing.T, kind MessageKind, timeout time.Duration) Message {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case rep, ok := <-r.reports:
			if !ok {
				t.Fatalf("the message stream ended before a %s report", kind)
			}
			if rep.Kind == kind {
				return rep
			}
		case <-deadline:
			t.Fatalf("no %s report within %s", kind, timeout)
		}
	}
}

// wait returns Consume's error and every report not read yet.
func (r *consumeRun) wait(t *testing.T, timeout time.Duration) ([]Message, error) {
	t.Helper()
	var err error
	select {
	case err = <-r.err:
	case <-time.After(timeout):
		t.Fatalf("Consume still running after %s", timeout)
	}
	var reps []Message
	for rep := range r.reports {
		reps = append(reps, rep)
	}
	return reps, err
}

func kinds(reps []Message) string {
	var s []string
	for _, r := range reps {
		s = append(s, r.Kind.String())
	}
	return strings.Join(s, ",")
}

// checkCycles checks a whole run's reports: Started, cycles of W writes,
// Done on time.
//
// The count is bounded on both sides without trusting the scheduler: a
// consumer that stops early has fewer than minCycles, one that skips its
// sleeps has more than the window holds at one sleep per cycle. How many
// fit in between depends on the host (a virtual CPU can stall a 10ms
// sleep for tens of milliseconds), so the floor stays well under the
// window's ideal count.
func checkCycles(t *testing.T, reps []Message, cfg Config, began time.Time, minCycles int) {
	t.Helper()
	if len(reps) > 0 && reps[0].Kind == KindRegion {
		if reps[0].A == 0 || reps[0].B != cfg.Size {
			t.Errorf("region %v: want an address and %d bytes", reps[0], cfg.Size)
		}
		reps = reps[1:]
	}
	if len(reps) < 2 || reps[0].Kind != KindStarted || reps[len(reps)-1].Kind != KindDone {
		t.Fatalf("reports %s: want started, cycles, done", kinds(reps))
	}
	st, done := reps[0], reps[len(reps)-1]
	if st.TimeA().Before(began) || st.TimeB().Before(st.TimeA()) || st.TimeB().After(done.TimeA()) {
		t.Errorf("started %v: allocation at %v, filled at %v, want between %v and the end", st, st.TimeA(), st.TimeB(), began)
	}
	cycles := reps[1 : len(reps)-1]
	for i, c := range cycles {
		if c.Kind != KindCycle || c.A != int64(cfg.Writes) || c.B <= 0 {
			t.Fatalf("report %d: %v, want a cycle of %d writes with a duration", i+1, c, cfg.Writes)
		}
	}
	maxCycles := int(cfg.End.Sub(began)/cfg.Sleep) + 1
	if len(cycles) < minCycles || len(cycles) > maxCycles {
		t.Errorf("%d cycles, want %d to %d: at least a few, and no more than one per %s sleep", len(cycles), minCycles, maxCycles, cfg.Sleep)
	}
	if done.B != int64(len(cycles)) || done.Terminated() {
		t.Errorf("done %v: want B = %d cycles, not terminated", done, len(cycles))
	}
	// It never sleeps past t_f, so it ends within a cycle of it.
	if late := done.TimeA().Sub(cfg.End); late < 0 || late > 50*time.Millisecond {
		t.Errorf("done %s after t_f, want 0 to 50ms", late)
	}
}

func TestConsumeCycles(t *testing.T) {
	began := time.Now()
	cfg := cyclesConfig(4*testMiB, 1000, 10*time.Millisecond, began.Add(300*time.Millisecond))
	cfg.Start = began
	r := startConsume(t, cfg, true)
	reps, err := r.wait(t, 5*time.Second)
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	checkCycles(t, reps, cfg, began, 5)
}

// With Cycles a consumer does that much work and stops, long before t_f,
// without sleeping after its last cycle.
func TestConsumeStopsAfterItsCycles(t *testing.T) {
	began := time.Now()
	cfg := cyclesConfig(4*testMiB, 1000, 10*time.Millisecond, began.Add(time.Hour))
	cfg.Start, cfg.Cycles = began, 7
	r := startConsume(t, cfg, true)
	reps, err := r.wait(t, 10*time.Second)
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if len(reps) != 10 || reps[0].Kind != KindRegion || reps[1].Kind != KindStarted || reps[9].Kind != KindDone {
		t.Fatalf("reports %s: want region, started, 7 cycles, done", kinds(reps))
	}
	reps = reps[1:]
	for i, c := range reps[1:8] {
		if c.Kind != KindCycle || c.A != int64(cfg.Writes) {
			t.Errorf("report %d: %v, want a cycle of %d writes", i+1, c, cfg.Writes)
		}
	}
	done := reps[8]
	if done.B != 7 || done.Terminated() {
		t.Errorf("done %v: want 7 cycles, not terminated", done)
	}
	// Six sleeps of 10 ms between seven cycles.
	if done.TimeA().Before(began.Add(60 * time.Millisecond)) {
		t.Errorf("done %s after the start, want at least the six sleeps between cycles", done.TimeA().Sub(began))
	}
	if bad := (Config{Mode: ModeCycles, Size: testMiB, Writes: 1, Cycles: -1, Backing: run.BackingAnon, Fill: run.FillRandom}).Validate(); bad == nil || !strings.Contains(bad.Error(), "--cycles") {
		t.Errorf("--cycles=-1: %v, want an error naming --cycles", bad)
	}
}

// TestConsumeCyclesOnTheBoard: with a cycle log, the pipe carries only the
// start and the end, and the board holds every cycle the end counts.
func TestConsumeCyclesOnTheBoard(t *testing.T) {
	board, err := NewCycleBoard(2)
	if err != nil {
		t.Fatal(err)
	}
	defer board.Close()
	log, err := OpenCycleLog(int(board.File.Fd()), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	began := time.Now()
	cfg := cyclesConfig(4*testMiB, 1000, 10*time.Millisecond, began.Add(300*time.Millisecond))
	cfg.Start, cfg.Index, cfg.CycleLog = began, 1, true
	r := startConsumeLogged(t, cfg, true, nil, log)
	reps, err := r.wait(t, 5*time.Second)
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if len(reps) != 3 || reps[0].Kind != KindRegion || reps[1].Kind != KindStarted || reps[2].Kind != KindDone {
		t.Fatalf("reports %s: want region, started and done only", kinds(reps))
	}
	var ds []time.Duration
	n := board.Take(1, func(w int64, d time.Duration) {
		if w != int64(cfg.Writes) || d <= 0 {
			t.Errorf("logged a cycle of %d writes in %s, want %d writes with a duration", w, d, cfg.Writes)
		}
		ds = append(ds, d)
	})
	if n < 5 || int64(n) != reps[2].B || len(ds) != int(n) {
		t.Errorf("board: %d cycles counted, %d passed; done says %d; want at least 5, all equal", n, len(ds), reps[2].B)
	}
	if other := board.Take(0, func(int64, time.Duration) {}); other != 0 {
		t.Errorf("%d cycles in another consumer's slot", other)
	}
}

func TestConsumeFileBacking(t *testing.T) {
	for _, fill := range []string{run.FillRandom, run.FillZero} {
		t.Run(fill, func(t *testing.T) {
			dir := t.TempDir()
			began := time.Now()
			cfg := cyclesConfig(4*testMiB, 1000, 10*time.Millisecond, began.Add(300*time.Millisecond))
			cfg.Backing, cfg.FileDir, cfg.Fill = run.BackingFile, dir, fill
			r := startConsume(t, cfg, true)
			st := r.next(t, KindStarted, 5*time.Second)
			assertEmptyDir(t, dir) // while the region is mapped
			reps, err := r.wait(t, 5*time.Second)
			if err != nil {
				t.Fatalf("Consume: %v", err)
			}
			checkCycles(t, append([]Message{st}, reps...), cfg, began, 5)
			assertEmptyDir(t, dir)
		})
	}
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Fatalf("%s holds %d entries (first %q), want none: the backing file must have no name", dir, len(ents), ents[0].Name())
	}
}

// The fallback for file systems without O_TMPFILE also leaves no name.
func TestCreateUnlinked(t *testing.T) {
	dir := t.TempDir()
	f, err := createUnlinked(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	assertEmptyDir(t, dir)
	if _, err := f.WriteString("still usable"); err != nil {
		t.Fatalf("writing the unlinked file: %v", err)
	}
}

func TestConsumeWaitsForPlannedStart(t *testing.T) {
	start := time.Now().Add(200 * time.Millisecond)
	cfg := cyclesConfig(testMiB, 100, 10*time.Millisecond, start.Add(100*time.Millisecond))
	cfg.Start = start
	r := startConsume(t, cfg, true)
	st := r.next(t, KindStarted, 5*time.Second)
	if st.TimeA().Before(start) {
		t.Fatalf("allocated at %v, before the planned start %v", st.TimeA(), start)
	}
	if _, err := r.wait(t, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// joinRecorder stands in for cgroup.procs: it keeps what was written and
// when, or fails every write.
type joinRecorder struct {
	mu   sync.Mutex
	at   []time.Time
	data string
	err  error
}

func (j *joinRecorder) Write(b []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return 0, j.err
	}
	j.at = append(j.at, time.Now())
	j.data += string(b)
	return len(b), nil
}

func TestConsumeJoinsAtPlannedStart(t *testing.T) {
	start := time.Now().Add(200 * time.Millisecond)
	cfg := cyclesConfig(testMiB, 100, 10*time.Millisecond, start.Add(100*time.Millisecond))
	cfg.Start, cfg.Join = start, true
	j := &joinRecorder{}
	r := startConsumeJoining(t, cfg, true, j)
	r.next(t, KindStarted, 5*time.Second)
	j.mu.Lock()
	at, data := j.at, j.data
	j.mu.Unlock()
	if data != "0" || len(at) != 1 {
		t.Fatalf("wrote %q in %d writes to cgroup.procs, want one write of \"0\" (the consumer itself)", data, len(at))
	}
	if at[0].Before(start) {
		t.Errorf("joined at %v, before the planned start %v", at[0], start)
	}
	if _, err := r.wait(t, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// A consumer that cannot join the run cgroup must not allocate outside it.
func TestConsumeJoinFailureAllocatesNothing(t *testing.T) {
	cfg := cyclesConfig(testMiB, 100, 0, time.Now().Add(time.Hour))
	cfg.Join = true
	r := startConsumeJoining(t, cfg, true, &joinRecorder{err: unix.EBUSY})
	reps, err := r.wait(t, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "joining the run cgroup") {
		t.Fatalf("Consume: %v, want an error about joining the run cgroup", err)
	}
	if len(reps) != 1 || reps[0].Kind != KindError || reps[0].A != int64(unix.EBUSY) {
		t.Fatalf("reports %v, want only an error with EBUSY (no start: nothing allocated)", reps)
	}
	if err := Consume(context.Background(), cfg, nil, io.Discard, nil); err == nil || !strings.Contains(err.Error(), "--join") {
		t.Errorf("--join without a cgroup.procs: %v, want an error naming --join", err)
	}
}

func TestConsumeCancelStopsQuickly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes int
		sleep  time.Duration
		after  MessageKind // cancel once this report arrives
		inside string      // and the consumer is in this function
	}{
		{"while sleeping", 1000, time.Hour, KindCycle, "sleepCtx"},
		// One cycle of 10⁸ writes takes seconds: the stop flag must cut it.
		{"inside a slow cycle", run.MaxWrites, 0, KindStarted, "writeCycle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cyclesConfig(4*testMiB, tc.writes, tc.sleep, time.Now().Add(time.Hour))
			r := startConsume(t, cfg, true)
			r.next(t, tc.after, 5*time.Second)
			waitInside(t, tc.inside)
			t0 := time.Now()
			r.cancel()
			reps, err := r.wait(t, 5*time.Second)
			if d := time.Since(t0); d > 200*time.Millisecond {
				t.Errorf("stopped %s after the cancel, want within 200ms", d)
			}
			if err != nil {
				t.Fatalf("Consume: %v, want nil after SIGTERM", err)
			}
			if len(reps) == 0 || reps[len(reps)-1].Kind != KindDone || !reps[len(reps)-1].Terminated() {
				t.Fatalf("reports %s, want a terminated done last", kinds(reps))
			}
			if tc.writes == run.MaxWrites {
				c := reps[0]
				if c.Kind != KindCycle || c.A >= run.MaxWrites || c.A%stopCheckWrites != 0 {
					t.Errorf("cut cycle %v: want fewer than %d writes, a multiple of %d", c, run.MaxWrites, stopCheckWrites)
				}
			}
		})
	}
}

// waitInside waits until a goroutine's innermost frame outside the runtime
// is the consumer's function fn: blocked in it, or running it.
func waitInside(t *testing.T, fn string) {
	t.Helper()
	const pkg = "github.com/thrashscope/thrashscope/internal/consumer."
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		stacks := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(stacks, "\n\n") {
			for _, l := range strings.Split(g, "\n")[1:] {
				if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "runtime.") {
					continue
				}
				if strings.HasPrefix(l, pkg+fn+"(") {
					return
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine in %s%s after 5s:\n%s", pkg, fn, stacks)
		}
	}
}

func TestConsumeCancelBeforeGo(t *testing.T) {
	r := startConsume(t, cyclesConfig(testMiB, 100, 0, time.Now().Add(time.Hour)), false)
	waitInside(t, "ConsumeLogged") // waiting for the go byte
	r.cancel()
	reps, err := r.wait(t, time.Second)
	if err != nil || len(reps) != 1 || reps[0].Kind != KindDone || !reps[0].Terminated() || reps[0].B != 0 {
		t.Fatalf("got %v, %s; want nil and one terminated done of 0 cycles", err, kinds(reps))
	}
}

func TestConsumeParentGone(t *testing.T) {
	t.Run("before go", func(t *testing.T) {
		r := startConsume(t, cyclesConfig(testMiB, 100, 0, time.Now().Add(time.Hour)), false)
		r.ctl.Close()
		reps, err := r.wait(t, time.Second)
		if !errors.Is(err, ErrParentGone) || len(reps) != 0 {
			t.Fatalf("got %v and %s, want ErrParentGone and no reports", err, kinds(reps))
		}
	})
	t.Run("while writing", func(t *testing.T) {
		r := startConsume(t, cyclesConfig(4*testMiB, run.MaxWrites, 0, time.Now().Add(time.Hour)), true)
		r.next(t, KindStarted, 5*time.Second)
		t0 := time.Now()
		r.ctl.Close()
		reps, err := r.wait(t, time.Second)
		if d := time.Since(t0); d > 200*time.Millisecond {
			t.Errorf("exited %s after EOF, want at once", d)
		}
		if !errors.Is(err, ErrParentGone) || len(reps) != 0 {
			t.Fatalf("got %v and %s, want ErrParentGone and nothing more reported", err, kinds(reps))
		}
	})
}

func TestConsumeMapFailureReportsError(t *testing.T) {
	cfg := cyclesConfig(testMiB, 100, 0, time.Now().Add(time.Hour))
	cfg.Backing, cfg.FileDir = run.BackingFile, filepath.Join(t.TempDir(), "missing")
	r := startConsume(t, cfg, true)
	reps, err := r.wait(t, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Consume: %v, want an error naming the directory", err)
	}
	if len(reps) != 1 || reps[0].Kind != KindError || reps[0].A != int64(unix.ENOENT) {
		t.Fatalf("reports %v, want one error with ENOENT", reps)
	}
}

func TestFillRandomIsIncompressible(t *testing.T) {
	ratio := func(b []byte) float64 {
		var out bytes.Buffer
		w, _ := flate.NewWriter(&out, flate.DefaultCompression)
		w.Write(b)
		w.Close()
		return float64(out.Len()) / float64(len(b))
	}
	b := make([]byte, testMiB+5) // and a tail that is not a whole word
	if !fillRandom(b, 1, nil) {
		t.Fatal("fillRandom abandoned without a stop flag")
	}
	if r := ratio(b); r < 0.95 {
		t.Errorf("random fill compresses to %.3f of its size, want more than 0.95", r)
	}
	if r := ratio(make([]byte, testMiB)); r > 0.05 {
		t.Fatalf("the check is blind: zeros compress only to %.3f", r)
	}
	if bytes.Count(b[len(b)-5:], []byte{0}) == 5 {
		t.Error("the tail was left unfilled")
	}
}

func TestFillZeroTouchesEveryPage(t *testing.T) {
	b, err := mapRegion(testMiB, run.BackingAnon, "")
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	if !fillZero(b, nil) {
		t.Fatal("fillZero abandoned without a stop flag")
	}
	// pagemap's present bit (63) is readable without privileges.
	addr, err := strconv.ParseUint(strings.TrimPrefix(fmt.Sprintf("%p", &b[0]), "0x"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pages := len(b) / pageSize
	buf := make([]byte, 8*pages)
	if _, err := f.ReadAt(buf, int64(addr/pageSize*8)); err != nil {
		t.Fatal(err)
	}
	for i := range pages {
		if binary.LittleEndian.Uint64(buf[8*i:])>>63 == 0 {
			t.Fatalf("page %d of %d is not present after the fill", i, pages)
		}
	}
}

// The region has transparent huge pages off: VmFlags "nh" in smaps.
func TestMapRegionNoHugePages(t *testing.T) {
	for _, backing := range []string{run.BackingAnon, run.BackingFile} {
		b, err := mapRegion(4*testMiB, backing, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		flags := vmFlags(t, "self", fmt.Sprintf("%p", &b[0]))
		unix.Munmap(b)
		if !strings.Contains(" "+flags+" ", " nh ") {
			t.Errorf("%s region VmFlags %q, want nh", backing, flags)
		}
	}
}

// vmFlags returns the VmFlags of pid's mapping that holds addr ("0x...").
func vmFlags(t *testing.T, pid, addr string) string {
	t.Helper()
	a, err := strconv.ParseUint(strings.TrimPrefix(addr, "0x"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/" + pid + "/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := testenv.VMARange(line); ok {
			in = lo <= a && a < hi
		} else if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:"))
		}
	}
	t.Fatalf("no mapping holds %s", addr)
	return ""
}

func TestWriteCycle(t *testing.T) {
	b := make([]byte, 3*pageSize+1) // not a power of two
	var stop atomic.Bool
	state := uint64(42)
	if n := writeCycle(b, 10_000, &state, &stop); n != 10_000 {
		t.Fatalf("writeCycle did %d writes, want 10000", n)
	}
	if state == 42 {
		t.Error("the generator state did not advance")
	}
	if bytes.Count(b, []byte{0}) > len(b)/2 {
		t.Error("10000 writes over 12 KiB left most bytes untouched")
	}
	stop.Store(true)
	if n := writeCycle(b, 10_000, &state, &stop); n != stopCheckWrites {
		t.Fatalf("with the stop flag set: %d writes, want %d", n, stopCheckWrites)
	}
}

// The real binary, started the way the master starts it.

var buildLoadgen = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "thrashscope-loadgen-test-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "loadgen")
	out, err := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "github.com/thrashscope/thrashscope/cmd/loadgen").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) {
	code := m.Run()
	if bin, err := buildLoadgen(); err == nil {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

type consumerProc struct {
	cmd     *exec.Cmd
	ctl     io.WriteCloser
	reports chan Message
	stderr  *bytes.Buffer
}

// startConsumerProc starts a consumer process as the master does; procs,
// when given, is fd 4, the cgroup.procs it joins through.
func startConsumerProc(t *testing.T, cfg Config, procs ...*os.File) *consumerProc {
	t.Helper()
	var bin string
	if os.Getenv(testenv.BinariesEnv) != "" {
		bin = testenv.Binary(t, "loadgen") // a test VM: built already
	} else {
		if _, err := exec.LookPath("go"); err != nil {
			testenv.Unavailable(t, "no go tool on PATH to build cmd/loadgen")
		}
		var err error
		if bin, err = buildLoadgen(); err != nil {
			t.Fatal(err)
		}
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &consumerProc{cmd: exec.Command(bin, cfg.Args()...), reports: make(chan Message, 1024), stderr: &bytes.Buffer{}}
	p.cmd.ExtraFiles = append([]*os.File{repW}, procs...)
	p.cmd.Env = Env(os.Environ())
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if p.ctl, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	repW.Close()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	go func() {
		defer repR.Close()
		defer close(p.reports)
		for {
			rep, err := ReadMessage(repR)
			if err != nil {
				return
			}
			p.reports <- rep
		}
	}()
	return p
}

func (p *consumerProc) next(t *testing.T, timeout time.Duration) Message {
	t.Helper()
	select {
	case rep, ok := <-p.reports:
		if !ok {
			t.Fatalf("the consumer closed its message pipe; stderr: %s", p.stderr)
		}
		return rep
	case <-time.After(timeout):
		t.Fatalf("no report within %s", timeout)
	}
	return Message{}
}

// exit waits for the process and returns its status and remaining reports.
func (p *consumerProc) exit(t *testing.T, timeout time.Duration) (int, []Message) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("the consumer still runs after %s", timeout)
	}
	var reps []Message
	for r := range p.reports {
		reps = append(reps, r)
	}
	return p.cmd.ProcessState.ExitCode(), reps
}

func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, line)
			}
			return n << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// regions counts pid's mappings of at least size bytes with huge pages off:
// the consumer's regions.
func regions(t *testing.T, pid int, size uint64) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var big bool
	for _, line := range strings.Split(string(b), "\n") {
		if lo, hi, ok := testenv.VMARange(line); ok {
			big = hi-lo >= size
		} else if big && strings.HasPrefix(line, "VmFlags:") && strings.Contains(line+" ", " nh ") {
			n++
		}
	}
	return n
}

func TestConsumerProcess(t *testing.T) {
	const size = 64 * testMiB
	cfg := cyclesConfig(size, 1000, 10*time.Millisecond, time.Now().Add(time.Hour))
	cfg.Index, cfg.ParentPID = 3, os.Getpid()
	p := startConsumerProc(t, cfg)
	pid := p.cmd.Process.Pid

	var comm string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if comm = strings.TrimSpace(string(b)); comm == "consumer-03" {
			break
		}
	}
	if comm != "consumer-03" {
		t.Fatalf("/proc/%d/comm = %q, want consumer-03; stderr: %s", pid, comm, p.stderr)
	}
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if !bytes.Contains(stat, []byte("(consumer-03)")) {
		t.Errorf("/proc/%d/stat = %q, want (consumer-03)", pid, stat)
	}

	// Before the go byte it holds nothing, though its start is past.
	time.Sleep(100 * time.Millisecond)
	if rss := procStatus(t, pid, "VmRSS"); rss > size/4 {
		t.Errorf("VmRSS %d MiB before the go byte, want little", rss>>20)
	}
	if n := regions(t, pid, size); n != 0 {
		t.Errorf("%d regions mapped before the go byte, want none", n)
	}
	select {
	case r := <-p.reports:
		t.Fatalf("reported %v before the go byte", r)
	default:
	}

	if _, err := p.ctl.Write([]byte{'g'}); err != nil {
		t.Fatal(err)
	}
	if r := p.next(t, 5*time.Second); r.Kind != KindRegion || r.B != size {
		t.Fatalf("first report %v, want the region of %d bytes", r, size)
	}
	if r := p.next(t, 5*time.Second); r.Kind != KindStarted || r.B == 0 {
		t.Fatalf("second report %v, want started and filled", r)
	}
	if r := p.next(t, 5*time.Second); r.Kind != KindCycle || r.A != 1000 {
		t.Fatalf("third report %v, want a cycle of 1000 writes", r)
	}
	if rss := procStatus(t, pid, "VmRSS"); rss < size {
		t.Errorf("VmRSS %d MiB after the fill, want at least %d", rss>>20, size>>20)
	}
	if n := regions(t, pid, size); n != 1 {
		t.Errorf("%d regions mapped, want 1", n)
	}

	// The master is gone: exit at once, report nothing more.
	p.ctl.Close()
	code, reps := p.exit(t, 2*time.Second)
	for _, r := range reps {
		if r.Kind != KindCycle {
			t.Errorf("reported %v after stdin closed", r)
		}
	}
	if code != 0 {
		t.Errorf("exit status %d after stdin closed, want 0; stderr: %s", code, p.stderr)
	}
}

func TestConsumerProcessSIGTERM(t *testing.T) {
	cfg := cyclesConfig(8*testMiB, 1000, 10*time.Millisecond, time.Now().Add(time.Hour))
	cfg.Backing, cfg.FileDir = run.BackingFile, t.TempDir()
	p := startConsumerProc(t, cfg)
	p.ctl.Write([]byte{'g'})
	for p.next(t, 5*time.Second).Kind != KindCycle {
	}
	t0 := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	code, reps := p.exit(t, 2*time.Second)
	if d := time.Since(t0); d > 200*time.Millisecond {
		t.Errorf("exited %s after SIGTERM, want within 200ms", d)
	}
	if code != 0 || len(reps) == 0 || !reps[len(reps)-1].Terminated() {
		t.Fatalf("exit %d, reports %s; want 0 and a terminated done; stderr: %s", code, kinds(reps), p.stderr)
	}
	assertEmptyDir(t, cfg.FileDir)
}

func TestConsumerProcessExitStatus(t *testing.T) {
	ok := cyclesConfig(testMiB, 100, 0, time.Now().Add(time.Hour))

	bad := ok
	bad.Writes = 0
	p := startConsumerProc(t, bad)
	if code, reps := p.exit(t, 5*time.Second); code != 2 || len(reps) != 0 || !strings.Contains(p.stderr.String(), "--writes") {
		t.Errorf("bad flags: exit %d, reports %s, stderr %q; want 2, none, a message naming --writes", code, kinds(reps), p.stderr)
	}

	// Without ExtraFiles, fd 3 is whatever the runtime opened there.
	noPipe := exec.Command(p.cmd.Path, ok.Args()...)
	var stderr bytes.Buffer
	noPipe.Stderr = &stderr
	if err := noPipe.Run(); noPipe.ProcessState == nil || noPipe.ProcessState.ExitCode() != 2 || !strings.Contains(stderr.String(), "fd 3") {
		t.Errorf("no message pipe: %v, stderr %q; want exit 2 and a message about fd 3", err, stderr.String())
	}

	orphan := ok
	orphan.ParentPID = 1 // not our parent: as if the master died before prctl
	p = startConsumerProc(t, orphan)
	if code, reps := p.exit(t, 5*time.Second); code != 0 || len(reps) != 0 {
		t.Errorf("parent gone: exit %d, reports %s; want 0 and none; stderr %s", code, kinds(reps), p.stderr)
	}

	fatal := ok
	fatal.Backing, fatal.FileDir = run.BackingFile, filepath.Join(t.TempDir(), "missing")
	p = startConsumerProc(t, fatal)
	p.ctl.Write([]byte{'g'})
	code, reps := p.exit(t, 5*time.Second)
	if code != 1 || len(reps) != 1 || reps[0].Kind != KindError || !strings.Contains(p.stderr.String(), "missing") {
		t.Errorf("fatal error: exit %d, reports %s, stderr %q; want 1, one error, the message", code, kinds(reps), p.stderr)
	}
}

// enomemOnce refuses its first writes with ENOMEM, as a pipe does whose
// buffer page the cgroup's limit refused.
type enomemOnce struct {
	refuse int
	got    [][]byte
}

func (w *enomemOnce) Write(b []byte) (int, error) {
	if w.refuse > 0 {
		w.refuse--
		return 0, &os.PathError{Op: "write", Path: "message pipe", Err: unix.ENOMEM}
	}
	w.got = append(w.got, append([]byte(nil), b...))
	return len(b), nil
}

// A report refused for want of memory is retried, not a failed run.
func TestMessageRetriesENOMEM(t *testing.T) {
	w := &enomemOnce{refuse: 3}
	c := &consumer{ctx: context.Background(), rep: w}
	if err := c.send(Message{Kind: KindDone}); err != nil {
		t.Fatal(err)
	}
	if len(w.got) != 1 {
		t.Errorf("%d reports written, want 1 after 3 refusals", len(w.got))
	}
}

// A consumer in a cgroup v1 run at its limit, under the OOM guard, with
// nothing the kernel can reclaim, survives signals to each of its threads:
// the kernel writes a signal frame on the thread's signal stack, and a
// frame page charged then would fail (a charge made by the kernel is
// refused, not parked, with the OOM killer off) and kill the consumer with
// SIGSEGV. This is how a consumer was lost in an e2 run.
func TestConsumerSurvivesSignalsAtTheLimit(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	const limit = 32 * testMiB
	cg := testenv.MemoryCgroup(t, limit)
	if cg.V2 {
		testenv.NotApplicable(t, "memory is on cgroup v2, which has no oom_kill_disable: a charge fails into the OOM killer, not a park, and the v1 guard and this hazard do not exist", "TestOOMGuard (the v2 guard)")
	}
	// Nothing the kernel may reclaim: the consumer stays at the limit.
	if err := os.WriteFile(filepath.Join(cg.Path, "memory.swappiness"), []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	guard := cg.Guard
	if guard == nil {
		t.Fatal("the test's cgroup has no OOM guard")
	}
	procs, err := cg.OpenProcs()
	if err != nil {
		t.Fatal(err)
	}
	cfg := cyclesConfig(2*limit, 1000, 10*time.Millisecond, time.Now().Add(time.Hour))
	cfg.Join = true
	c := startConsumerProc(t, cfg, procs)
	procs.Close()
	pid := c.cmd.Process.Pid
	if _, err := c.ctl.Write([]byte{'g'}); err != nil {
		t.Fatal(err)
	}
	// Its fill stops at the limit: parked, rescued in vain.
	for deadline := time.Now().Add(10 * time.Second); guard.Rescues() < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s the guard rescued %d times, want the consumer parked at the limit; stderr: %s", guard.Rescues(), c.stderr)
		}
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			// SIGURG: the runtime's own preemption signal, otherwise ignored.
			_ = unix.Tgkill(pid, tid, unix.SIGURG)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Alive is not enough to tell in a moment: let it reclaim to swap, and
	// it must go on to finish its fill and write its cycles. One killed by
	// a signal frame closes its pipe instead.
	if err := os.WriteFile(filepath.Join(cg.Path, "memory.swappiness"), []byte("60"), 0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.After(60 * time.Second); ; {
		select {
		case m, ok := <-c.reports:
			if !ok {
				_ = c.cmd.Wait()
				t.Fatalf("the consumer died (%v) after a signal to each of its %d threads at the limit; stderr: %s", c.cmd.ProcessState, len(tasks), c.stderr)
			}
			if m.Kind != KindCycle {
				continue
			}
			t.Logf("%d threads signalled three times at the limit, %d rescues; the consumer then wrote a cycle", len(tasks), guard.Rescues())
			return
		case <-deadline:
			t.Fatalf("no cycle 60 s after its memory could go to swap; stderr: %s", c.stderr)
		}
	}
}

// The consumer process is the loadgen binary: it must not link the BPF
// loader (cilium/ebpf, package probe), which it never uses.
func TestConsumerBinaryDoesNotLinkTheProbe(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		testenv.Unavailable(t, "no go tool on PATH to list cmd/loadgen's dependencies")
	}
	out, err := exec.Command("go", "list", "-deps", "../../cmd/loadgen").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/cilium/ebpf") || dep == "github.com/thrashscope/thrashscope/internal/probe" {
			t.Errorf("cmd/loadgen links %s", dep)
		}
	}
}

// A consumer joins a run cgroup that another consumer has filled to its
// limit, under the OOM guard, with nothing left to reclaim: its joins must
// not be charged to the full group and refused. Where memory is on cgroup
// v1 it also joins its group in the unified hierarchy; written after the
// memory group, that write was charged to the full group and refused with
// ENOMEM ("joining its group in the unified hierarchy: write run
// cgroup.procs: cannot allocate memory"), and the run failed. It must then
// write cycles once the group may reclaim to swap again.
func TestConsumerJoinsAFullGroup(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	const limit = 32 * testMiB
	cg := testenv.MemoryCgroup(t, limit)
	if cg.Guard == nil {
		t.Fatal("the test's cgroup has no OOM guard")
	}
	// Nothing the kernel may reclaim: the filler holds the group at its
	// limit.
	noSwap, swap := "memory.swappiness", []string{"0", "60"}
	if cg.V2 {
		noSwap, swap = "memory.swap.max", []string{"0", "max"}
	}
	if err := os.WriteFile(filepath.Join(cg.Path, noSwap), []byte(swap[0]), 0); err != nil {
		t.Fatal(err)
	}
	procs := func() []*os.File {
		p, err := cg.OpenProcs()
		if err != nil {
			t.Fatal(err)
		}
		return []*os.File{p}
	}
	filler := cyclesConfig(2*limit, 1000, 10*time.Millisecond, time.Now().Add(time.Hour))
	filler.Join = true
	f := startConsumerProc(t, filler, procs()...)
	if _, err := f.ctl.Write([]byte{'g'}); err != nil {
		t.Fatal(err)
	}
	full := func() bool {
		if !cg.V2 {
			return cg.Guard.Rescues() >= 2 // parked at the limit, rescued in vain
		}
		b, _ := os.ReadFile(filepath.Join(cg.Path, "memory.current"))
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n >= limit-4*testMiB // throttled at the guard's memory.high
	}
	for deadline := time.Now().Add(20 * time.Second); !full(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s the group is not full (%d rescues); filler stderr: %s", cg.Guard.Rescues(), f.stderr)
		}
	}
	// Held full, not growing: left running, the filler crept on from the
	// guard's memory.high to memory.max with nothing to reclaim, and the
	// kernel OOM-killed it, then the joiner, while the joiner under TCG
	// was still starting (a 6.1 guest in CI). Stopped, it holds its pages.
	if err := f.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	joiner := cyclesConfig(4*testMiB, 100, 10*time.Millisecond, time.Now().Add(time.Hour))
	joiner.Index, joiner.Join = 1, true
	files := procs()
	if !cg.V2 {
		unified := testenv.UnifiedGroup(t, "join", false)
		u, err := unified.OpenProcs()
		if err != nil {
			t.Fatal(err)
		}
		joiner.JoinUnified = true
		files = append(files, nil, u) // fd 4 the memory group, fd 5 no board, fd 6 the unified group
	}
	j := startConsumerProc(t, joiner, files...)
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
	if _, err := j.ctl.Write([]byte{'g'}); err != nil {
		t.Fatal(err)
	}
	// Joined both, in the full group: its pid is in the memory group.
	pid := strconv.Itoa(j.cmd.Process.Pid)
	// Looked for every 2 ms: once in, the joiner's own pages take the
	// group past its limit until it may swap.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(cg.Path, "cgroup.procs"))
		if slices.Contains(strings.Fields(string(b)), pid) {
			break
		}
		if j.cmd.ProcessState != nil || time.Now().After(deadline) {
			events, _ := os.ReadFile(filepath.Join(cg.Path, "memory.events"))
			t.Fatalf("the joiner is not in the full group after 20 s; the group's memory.events: %q; stderr: %s", events, j.stderr)
		}
	}
	if err := os.WriteFile(filepath.Join(cg.Path, noSwap), []byte(swap[1]), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.After(60 * time.Second); ; {
		select {
		case m, ok := <-j.reports:
			if !ok {
				_ = j.cmd.Wait()
				t.Fatalf("the joiner died (%v) joining a full group; stderr: %s", j.cmd.ProcessState, j.stderr)
			}
			if m.Kind == KindCycle {
				t.Logf("joined a group at its limit (%d rescues) and wrote a cycle once it could swap", cg.Guard.Rescues())
				return
			}
		case <-deadline:
			t.Fatalf("no cycle from the joiner 60 s after the group could swap; stderr: %s", j.stderr)
		}
	}
}
