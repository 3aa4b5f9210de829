package probe

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// The test binary doubles as the child that takes the faults, so that the
// faulting process is a separate tgid with its own maj_flt.
const childEnv = "THRASHSCOPE_PROBE_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if err := runChild(mode, os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child is a running test child: it says "ready" once set up, takes its
// faults when told "go", says "done", and exits when its stdin closes.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startChild(t *testing.T, mode, arg string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", arg)
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() {
		c.in.Close()
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	})
	return c
}

func (c *child) expect(t *testing.T, want string) {
	t.Helper()
	line, err := c.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != want {
		t.Fatalf("child said %q (%v), want %q", line, err, want)
	}
}

func (c *child) send(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(c.in, msg+"\n"); err != nil {
		t.Fatal(err)
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func runChild(mode, arg string) error {
	in := bufio.NewReader(os.Stdin)
	waitFor := func(want string) error {
		line, err := in.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != want {
			return fmt.Errorf("parent said %q (%v), want %q", line, err, want)
		}
		return nil
	}
	switch mode {
	case "file":
		// Read every page of a file whose cache was dropped. MADV_RANDOM
		// turns off readahead and fault-around, so each page is one major fault.
		f, err := os.Open(arg)
		if err != nil {
			return err
		}
		fi, _ := f.Stat()
		mem, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
		if err != nil {
			return err
		}
		if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
			return err
		}
		fmt.Println("ready")
		if err := waitFor("go"); err != nil {
			return err
		}
		touchPages(mem)
		fmt.Println("done")
	case "anon":
		// In a cgroup half the region's size: filling it pushes the first
		// half to swap, MADV_PAGEOUT the rest, and the limit keeps reclaim
		// evicting the swap cache, so touching it all back in takes
		// swap-in major faults on an anonymous VMA.
		size, _ := strconv.Atoi(arg)
		fmt.Println("ready")
		if err := waitFor("go"); err != nil {
			return err
		}
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return err
		}
		_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE)
		if _, err := rand.Read(mem); err != nil {
			return err
		}
		if err := unix.Madvise(mem, unix.MADV_PAGEOUT); err != nil {
			return fmt.Errorf("MADV_PAGEOUT: %w", err)
		}
		touchPages(mem)
		touchPages(mem)
		fmt.Println("done")
	case "thrash":
		// Rewrite random pages of a region larger than the cgroup limit
		// until told to stop: reclaim and refaults, so memory stalls.
		size, _ := strconv.Atoi(arg)
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return err
		}
		_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE)
		fmt.Println("ready")
		if err := waitFor("go"); err != nil {
			return err
		}
		stop := make(chan struct{})
		go func() { _ = waitFor("stop"); close(stop) }()
		pages := uint64(len(mem) / os.Getpagesize())
		x := uint64(88172645463325252)
		for {
			select {
			case <-stop:
				fmt.Println("done")
				_, _ = in.ReadString('\n')
				return nil
			default:
			}
			for range 1024 {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				mem[(x%pages)*uint64(os.Getpagesize())] = byte(x)
			}
		}
	case "idle":
		fmt.Println("ready")
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	_, _ = in.ReadString('\n') // until the parent closes stdin
	return nil
}

// sink keeps the compiler from dropping reads whose value is never used.
var sink byte

func touchPages(mem []byte) {
	var sum byte
	for i := 0; i < len(mem); i += os.Getpagesize() {
		sum += mem[i]
	}
	sink = sum
}

func loadForTest(t *testing.T) *Probe {
	t.Helper()
	testenv.RequirePrivileged(t)
	p, err := Load(Options{LatencyCalm: -1}) // time every fault
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("closing probe: %v", err)
		}
	})
	for _, st := range p.Status() {
		if !st.Attached {
			t.Fatalf("probe %s not attached: %v", st.Name, st.Err)
		}
	}
	return p
}

func majFlt(t *testing.T, pid int) uint64 {
	t.Helper()
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := fs.ProcessStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return ps.MajorFaults
}

func within(got, want uint64, frac float64) bool {
	return math.Abs(float64(got)-float64(want)) <= frac*float64(want)
}

// faultRound reads the probe, lets the child take its faults, and reads
// again: both snapshots, the child's counters and its maj_flt.
func faultRound(t *testing.T, p *Probe, c *child) (before, after Snapshot, got ProcessCounters, majflt uint64) {
	t.Helper()
	var err error
	if before, err = p.Read(); err != nil {
		t.Fatal(err)
	}
	c.send(t, "go")
	c.expect(t, "done")
	if after, err = p.Read(); err != nil {
		t.Fatal(err)
	}
	return before, after, after.Processes[uint32(c.pid())], majFlt(t, c.pid())
}

func TestMajorFaultsFileAgreeWithMajFlt(t *testing.T) {
	p := loadForTest(t)
	const size = 32 << 20
	pages := uint64(size / os.Getpagesize())
	c := startChild(t, "file", testenv.UncachedFile(t, size))
	c.expect(t, "ready")
	before, snap, got, want := faultRound(t, p, c)
	t.Logf("file: bpf anon=%d file=%d unknown=%d, maj_flt=%d, pages=%d", got.MajorFaults[0], got.MajorFaults[1], got.MajorFaults[2], want, pages)
	if want < pages*99/100 {
		t.Fatalf("maj_flt %d < %d pages: the cache was not dropped, the test proves nothing", want, pages)
	}
	if !within(got.MajorTotal(), want, 0.02) {
		t.Errorf("bpf major faults %d, /proc maj_flt %d: more than 2%% apart", got.MajorTotal(), want)
	}
	if got.MajorFaults[1] < pages*99/100 || got.MajorFaults[0] > got.MajorTotal()/100 {
		t.Errorf("split anon=%d file=%d, want file >= 99%% of %d pages and anon under 1%%", got.MajorFaults[0], got.MajorFaults[1], pages)
	}
	lat := snap.Latency[KindFile].Count() - before.Latency[KindFile].Count()
	if lat < pages*98/100 {
		t.Errorf("file latency histogram grew by %d, want about %d", lat, pages)
	}
	mean := (snap.Latency[KindFile].SumSeconds - before.Latency[KindFile].SumSeconds) / float64(lat)
	if mean <= 0 || mean > 1 {
		t.Errorf("mean file major-fault service time %v s, want in (0, 1]", mean)
	}
	t.Logf("file major-fault service time: mean %.1f µs over %d faults", mean*1e6, lat)
}

func TestMajorFaultsAnonAgreeWithMajFlt(t *testing.T) {
	testenv.RequireSwap(t)
	p := loadForTest(t)
	const size = 64 << 20
	pages := uint64(size / os.Getpagesize())
	cg := testenv.MemoryCgroup(t, size/2)
	c := startChild(t, "anon", strconv.Itoa(size))
	c.expect(t, "ready")
	if err := cg.Add(c.pid()); err != nil {
		t.Fatal(err)
	}
	before, snap, got, want := faultRound(t, p, c)
	t.Logf("anon: bpf anon=%d file=%d unknown=%d, maj_flt=%d, pages=%d", got.MajorFaults[0], got.MajorFaults[1], got.MajorFaults[2], want, pages)
	// Swap readahead brings neighbours in with each read, so fewer faults
	// than pages are major; a readahead window is at most 2^page-cluster.
	if want < pages/16 {
		t.Fatalf("maj_flt %d for %d paged-out pages: the memory was not swapped out", want, pages)
	}
	if !within(got.MajorTotal(), want, 0.02) {
		t.Errorf("bpf major faults %d, /proc maj_flt %d: more than 2%% apart", got.MajorTotal(), want)
	}
	if got.MajorFaults[0] < got.MajorTotal()*95/100 {
		t.Errorf("split anon=%d file=%d unknown=%d, want anon >= 95%%", got.MajorFaults[0], got.MajorFaults[1], got.MajorFaults[2])
	}
	// Swap-ins sleep on I/O, so their start must survive the switch out.
	if lat := snap.Latency[KindAnon].Count() - before.Latency[KindAnon].Count(); lat < got.MajorFaults[0]*98/100 {
		t.Errorf("anon latency histogram grew by %d for %d anon faults, want at least 98%%", lat, got.MajorFaults[0])
	}
}

func TestMemoryStallThrashingVersusIdle(t *testing.T) {
	testenv.RequireSwap(t)
	p := loadForTest(t)
	const limit = 64 << 20
	cg := testenv.MemoryCgroup(t, limit)

	idle := startChild(t, "idle", "")
	idle.expect(t, "ready")
	// A region a quarter over the limit: most refaults are of pages still
	// in the workingset, whose reads the kernel counts as memory stall. A
	// region three times the limit refaults pages long gone, whose reads
	// are plain I/O waits, and stalls only in reclaim: a few ms in 3 s.
	thrash := startChild(t, "thrash", strconv.Itoa(5*limit/4))
	if err := cg.Add(thrash.pid()); err != nil {
		t.Fatal(err)
	}
	thrash.expect(t, "ready")
	thrash.send(t, "go")
	time.Sleep(3 * time.Second)
	thrash.send(t, "stop")
	thrash.expect(t, "done")

	snap, err := p.Read()
	if err != nil {
		t.Fatal(err)
	}
	stalled := time.Duration(snap.Processes[uint32(thrash.pid())].StallNanoseconds)
	calm := time.Duration(snap.Processes[uint32(idle.pid())].StallNanoseconds)
	t.Logf("memory stall over 3 s: thrashing %v, idle %v, maj_flt %d", stalled, calm, majFlt(t, thrash.pid()))
	if stalled < 20*time.Millisecond { // 90-410 ms seen on a 2-core VM
		t.Errorf("thrashing process stalled %v, want at least 20ms", stalled)
	}
	if calm != 0 {
		t.Errorf("idle process stalled %v, want 0", calm)
	}
}

func TestProcessExitClearsCounters(t *testing.T) {
	p := loadForTest(t)
	c := startChild(t, "file", testenv.UncachedFile(t, 1<<20))
	c.expect(t, "ready")
	c.send(t, "go")
	c.expect(t, "done")
	pid := uint32(c.pid())
	snap, err := p.Read()
	if err != nil {
		t.Fatal(err)
	}
	if snap.Processes[pid].MajorTotal() == 0 {
		t.Fatal("child took no major faults")
	}
	c.in.Close()
	if err := c.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if snap, err = p.Read(); err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Processes[pid]; ok {
		t.Errorf("counters for exited pid %d still in the map", pid)
	}
}

// The fault-entry hooks follow major faults: detached at load, attached
// within one read of a major fault, detached again after a calm spell.
func TestLatencyHooksFollowMajorFaults(t *testing.T) {
	testenv.RequirePrivileged(t)
	p, err := Load(Options{LatencyCalm: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.LatencyArmed() {
		t.Fatal("fault-entry hooks attached at load, before any major fault")
	}
	for _, st := range p.Status() {
		if st.Name == FaultLatency && !st.Attached {
			t.Fatalf("fault_latency down at load: %v", st.Err)
		}
	}
	c := startChild(t, "file", testenv.UncachedFile(t, 1<<20))
	c.expect(t, "ready")
	c.send(t, "go")
	c.expect(t, "done")
	snap, err := p.Read()
	if err != nil {
		t.Fatal(err)
	}
	if !p.LatencyArmed() {
		t.Fatal("fault-entry hooks not attached after major faults")
	}
	// Faults taken while disarmed are not timed, and not counted lost.
	if lost := snap.Lost[FaultLatency]; lost > 10 {
		t.Errorf("%d fault starts counted lost while disarmed, want none beyond a few in flight", lost)
	}
	// Other processes may take a major fault at any moment, so look for a
	// read that saw none rather than assume the next one does.
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		if _, err := p.Read(); err != nil {
			t.Fatal(err)
		}
		if !p.LatencyArmed() {
			return
		}
	}
	t.Error("fault-entry hooks still attached after 50 reads with a 1 ns calm period")
}
