package probe

import (
	"bufio"
	"fmt"
	"github.com/cilium/ebpf/rlimit"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
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

// runPhase sends "go", waits d, sends "stop" (none when d is negative:
// the child stops by itself) and waits for "done". It
// returns false, having logged why, when the kernel SIGKILLed the child
// meanwhile: a memory cgroup v1 at its limit can OOM-kill the writer with
// swap free (every page active, reclaim empty-handed in 16 tries), which
// ends the measurement, not what it measures. Anything else is fatal.
func (c *child) runPhase(t *testing.T, d time.Duration) bool {
	t.Helper()
	return c.runPhaseUntil(t, d, d, func() bool { return true })
}

// runPhaseUntil is runPhase for at least d, and on until done says so or
// atMost has passed: a phase that must reach an amount of work whatever
// the machine's speed (a guest under TCG does in 3 s a fraction of what
// this host does).
func (c *child) runPhaseUntil(t *testing.T, d, atMost time.Duration, done func() bool) bool {
	t.Helper()
	_, err := io.WriteString(c.in, "go\n")
	if err == nil && d >= 0 {
		start := time.Now()
		time.Sleep(d)
		for !done() && time.Since(start) < atMost {
			time.Sleep(100 * time.Millisecond)
		}
		_, err = io.WriteString(c.in, "stop\n")
	}
	var line string
	if err == nil {
		line, err = c.out.ReadString('\n')
	}
	if err == nil && strings.TrimSpace(line) == "done" {
		return true
	}
	_ = c.cmd.Wait()
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		t.Logf("the child was SIGKILLed mid-phase (the memcg OOM killer, see the kernel log): trying again")
		return false
	}
	t.Fatalf("child phase: said %q (%v), exit %v", line, err, c.cmd.ProcessState)
	return false
}

// oomTries is how many times a thrash phase is tried when the OOM killer
// takes its writer.
const oomTries = 3

// pinToOneCPU keeps every thread of this process on one CPU, the one the
// process started on, threads made later too (they take their maker's
// mask). PSI's total for a group is the mean of its CPUs' stall times,
// each weighted by the group's non-idle time there: a process spread over
// two CPUs shows about half its stall time as "some" (a single writer
// under TCG: +87 % against PSI), on one CPU all of it.
func pinToOneCPU() error {
	var set unix.CPUSet
	set.Set(0)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, _ := strconv.Atoi(t.Name())
		if err := unix.SchedSetaffinity(tid, &set); err != nil {
			return fmt.Errorf("pinning thread %d to CPU 0: %w", tid, err)
		}
	}
	return nil
}

func runChild(mode, arg string) error {
	in := bufio.NewReader(os.Stdin)
	waitFor := func(want string) error {
		line, err := in.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != want {
			return fmt.Errorf("parent said %q (%v), want %q", line, err, want)
		}
		return nil
	}
	// untilStop runs step until the parent says "stop", then says "done".
	untilStop := func(step func()) error {
		stop := make(chan struct{})
		go func() { _ = waitFor("stop"); close(stop) }()
		for {
			select {
			case <-stop:
				fmt.Println("done")
				return nil
			default:
			}
			step()
		}
	}
	switch mode {
	case "seccomp":
		return seccompChild()
	case "file":
		// Read every page of a file whose cache was dropped, through a
		// private mapping. MADV_RANDOM turns off readahead and
		// fault-around, so each page is one major fault.
		mem, err := mapFile(arg, unix.PROT_READ, unix.MAP_PRIVATE)
		if err != nil {
			return err
		}
		fmt.Println("ready")
		if err := waitFor("go"); err != nil {
			return err
		}
		touchPages(mem)
		fmt.Println("done")
	case "anon", "shmem":
		// In a cgroup half the region's size: filling it pushes the first
		// half to swap, MADV_PAGEOUT the rest, and the limit keeps reclaim
		// evicting the swap cache, so touching it all back in takes
		// swap-in major faults: on private anonymous memory, or on shared
		// anonymous memory (shmem, as PostgreSQL's shared buffers).
		size, _ := strconv.Atoi(arg)
		fmt.Println("ready")
		if err := waitFor("go"); err != nil {
			return err
		}
		flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
		if mode == "shmem" {
			flags = unix.MAP_SHARED | unix.MAP_ANONYMOUS
		}
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, flags)
		if err != nil {
			return err
		}
		if err := swapOutAndBack(mem, true); err != nil {
			return err
		}
		fmt.Println("done")
	case "tmpfs":
		// The same through a file of a tmpfs (/dev/shm), shared.
		mem, err := mapFile(arg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		fmt.Println("ready")
		if err := waitFor("go"); err != nil {
			return err
		}
		if err := swapOutAndBack(mem, true); err != nil {
			return err
		}
		fmt.Println("done")
	case "cow":
		// A private mapping of a file whose every page is written: the
		// written pages are anonymous copies, so reading them back from
		// swap is an anon fault though the mapping has a file.
		mem, err := mapFile(arg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
		if err != nil {
			return err
		}
		fmt.Println("ready")
		if err := waitFor("go"); err != nil {
			return err
		}
		if err := swapOutAndBack(mem, false); err != nil {
			return err
		}
		fmt.Println("done")
	case "thrash":
		// Rewrite random pages of a region larger than the cgroup limit
		// until told to stop: reclaim and refaults, so memory stalls.
		if err := pinToOneCPU(); err != nil {
			return err
		}
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
		pages := uint64(len(mem) / os.Getpagesize())
		x := uint64(88172645463325252)
		if err := untilStop(func() {
			for range 1024 {
				x = xorshift(x)
				mem[(x%pages)*uint64(os.Getpagesize())] = byte(x)
			}
		}); err != nil {
			return err
		}
	case "thrash-file":
		// Read random pages of a file larger than the cgroup limit, cache
		// dropped, until told to stop: page-cache misses and reclaim.
		if err := pinToOneCPU(); err != nil {
			return err
		}
		mem, err := mapFile(arg, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		fmt.Println("ready")
		if err := waitFor("go"); err != nil {
			return err
		}
		pages := uint64(len(mem) / os.Getpagesize())
		x := uint64(88172645463325252)
		var sum byte
		if err := untilStop(func() {
			for range 1024 {
				x = xorshift(x)
				sum += mem[(x%pages)*uint64(os.Getpagesize())]
			}
		}); err != nil {
			return err
		}
		sink = sum
	case "churn":
		// Join each group under a directory in turn, c00000 and on, and
		// take two major faults in each (two uncached pages of a file,
		// read through a private mapping), then wait in the directory.
		dir, file, _ := strings.Cut(arg, ",")
		mem, err := mapFile(file, unix.PROT_READ, unix.MAP_PRIVATE)
		if err != nil {
			return err
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		fmt.Println("ready")
		if err := waitFor("go"); err != nil {
			return err
		}
		page, n := os.Getpagesize(), 0
		var sum byte
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, e.Name(), "cgroup.procs"), []byte("0"), 0); err != nil {
				return err
			}
			sum += mem[2*n*page] + mem[(2*n+1)*page]
			n++
		}
		sink = sum
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0); err != nil {
			return err
		}
		fmt.Println("done")
	case "deep":
		// Mappings of the three kinds, interleaved so that none merges
		// with its neighbour: an address space whose index is several
		// levels deep. Then, told "go" each time, one page of every
		// anonymous mapping, of every shared anonymous one, of every file
		// one, each set read back from swap or disk in a phase of its own.
		sets, err := deepMappings(arg)
		if err != nil {
			return err
		}
		fmt.Println("ready")
		for _, set := range sets {
			if err := waitFor("go"); err != nil {
				return err
			}
			for _, m := range set {
				touchPages(m[:os.Getpagesize()])
			}
			fmt.Println("done")
		}
	case "idle":
		fmt.Println("ready")
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	_, _ = in.ReadString('\n') // until the parent closes stdin
	return nil
}

func xorshift(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}

// mapFile maps the whole file at path, with readahead and fault-around off
// so that each page missing from memory is one fault.
func mapFile(path string, prot, flags int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), prot, flags)
	if err != nil {
		return nil, err
	}
	if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
		return nil, err
	}
	return mem, nil
}

// swapOutAndBack writes every page (random bytes when fill, else one byte
// a page), pages the region out and reads it back twice.
func swapOutAndBack(mem []byte, fill bool) error {
	_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE)
	if fill {
		testenv.RandomFill(mem)
	} else {
		for i := 0; i < len(mem); i += os.Getpagesize() {
			mem[i] = 1
		}
	}
	if err := unix.Madvise(mem, unix.MADV_PAGEOUT); err != nil {
		return fmt.Errorf("MADV_PAGEOUT: %w", err)
	}
	touchPages(mem)
	touchPages(mem)
	return nil
}

// deepKinds is how many mappings of each kind the "deep" child makes: 9,000
// in all, an address space's index four levels deep (a maple tree's leaf
// holds up to 16 mappings, a node above up to 10 children).
const deepKinds = 3000

// deepMappings makes deepKinds mappings of two pages each of private
// anonymous memory, shared anonymous memory and the file path (uncached),
// interleaved, the swap-backed ones written and paged out; it returns them
// by kind: anon, shmem, file.
func deepMappings(path string) ([3][][]byte, error) {
	var sets [3][][]byte
	page := os.Getpagesize()
	f, err := os.Open(path)
	if err != nil {
		return sets, err
	}
	defer f.Close()
	for i := range deepKinds {
		a, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return sets, err
		}
		s, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			return sets, err
		}
		m, err := unix.Mmap(int(f.Fd()), int64(i*2*page), 2*page, unix.PROT_READ, unix.MAP_PRIVATE)
		if err != nil {
			return sets, fmt.Errorf("mapping %d of %s: %w", i, path, err)
		}
		_ = unix.Madvise(m, unix.MADV_RANDOM)
		for _, mem := range [][]byte{a, s} {
			testenv.RandomFill(mem)
			if err := unix.Madvise(mem, unix.MADV_PAGEOUT); err != nil {
				return sets, fmt.Errorf("MADV_PAGEOUT: %w", err)
			}
		}
		sets[0], sets[1], sets[2] = append(sets[0], a), append(sets[1], s), append(sets[2], m)
	}
	return sets, nil
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

// wayEnv forces the tests' way (TestThePortableWayHere sets it for the
// tests it runs again); unset, the tests take the way this kernel offers.
const wayEnv = "THRASHSCOPE_PROBE_TEST_WAY"

// loadWay is Load in the tests' way, failing the test if another was taken.
func loadWay(t *testing.T, opts Options) (*Probe, error) {
	t.Helper()
	opts.Way = Way(os.Getenv(wayEnv))
	p, err := Load(opts)
	if err != nil {
		return nil, err
	}
	if opts.Way != "" && p.way != opts.Way {
		p.Close()
		t.Fatalf("loaded the %s way, want %s", p.way, opts.Way)
	}
	t.Logf("the %s way: %s", p.way, p.wayWhy)
	return p, nil
}

func loadForTest(t *testing.T) *Probe {
	t.Helper()
	testenv.RequirePrivileged(t)
	p, err := loadWay(t, Options{Calm: -1}) // time every fault, sample every stall
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
// again: both snapshots, what the child's counters grew by, and what its
// maj_flt grew by.
func faultRound(t *testing.T, p *Probe, c *child) (before, after readout.Snapshot, got readout.FaultCounts, majflt uint64, ok bool) {
	t.Helper()
	var err error
	m0 := majFlt(t, c.pid())
	if before, err = readArmed(p); err != nil {
		t.Fatal(err)
	}
	if !c.runPhase(t, -1) {
		return before, after, got, 0, false
	}
	if after, err = readArmed(p); err != nil {
		t.Fatal(err)
	}
	pid := uint32(c.pid())
	for k := range readout.NumKinds {
		got[k] = after.Processes[pid].MajorFaults[k] - before.Processes[pid].MajorFaults[k]
	}
	return before, after, got, majFlt(t, c.pid()) - m0, true
}

// Each kind of major fault, taken by a process of its own, against the
// kernel's maj_flt: the total within 2 %, and nearly all of the kind the
// memory is.
func TestMajorFaultKindsAgreeWithMajFlt(t *testing.T) {
	const size = 32 << 20
	pages := uint64(size / os.Getpagesize())
	for _, tc := range []struct {
		name string
		mode string
		kind readout.Kind
		// swapped shapes fill a cgroup half their size and swap
		swapped bool
		arg     func(t *testing.T) string
	}{
		{name: "file", mode: "file", kind: readout.File, arg: func(t *testing.T) string { return testenv.UncachedFile(t, size) }},
		{name: "anon", mode: "anon", kind: readout.Anon, swapped: true, arg: func(*testing.T) string { return strconv.Itoa(size) }},
		{name: "shared-anon", mode: "shmem", kind: readout.Shmem, swapped: true, arg: func(*testing.T) string { return strconv.Itoa(size) }},
		{name: "tmpfs", mode: "tmpfs", kind: readout.Shmem, swapped: true, arg: func(t *testing.T) string { return tmpfsFile(t, size) }},
		{name: "private-file-written", mode: "cow", kind: readout.Anon, swapped: true, arg: func(t *testing.T) string { return cachedFile(t, size) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.swapped {
				testenv.RequireSwap(t)
			}
			p := loadForTest(t)
			var cg *testenv.Cgroup
			if tc.swapped {
				cg = testenv.MemoryCgroup(t, size/2)
			}
			var before, after readout.Snapshot
			var got readout.FaultCounts
			var want uint64
			for try := 1; ; try++ {
				c := startChild(t, tc.mode, tc.arg(t))
				if cg != nil {
					if err := cg.Add(c.pid()); err != nil {
						t.Fatal(err)
					}
				}
				c.expect(t, "ready")
				var ok bool
				if before, after, got, want, ok = faultRound(t, p, c); ok {
					break
				}
				if try == oomTries {
					t.Fatalf("the OOM killer took the child in all %d tries", oomTries)
				}
			}
			lookups := after.MappingLookups - before.MappingLookups
			t.Logf("%s: bpf anon=%d shmem=%d file=%d unknown=%d, maj_flt=%d, pages=%d, mapping lookups=%d",
				tc.name, got[readout.Anon], got[readout.Shmem], got[readout.File], got[readout.Unknown], want, pages, lookups)
			// Swap readahead brings neighbours in with each read, so
			// fewer faults than pages are major; a readahead window is at
			// most 2^page-cluster.
			// Nearly every page of an uncached file is one major fault
			// (on ext4 under TCG about 1.5 % came in without one).
			if min := pages / 16; tc.swapped && want < min || !tc.swapped && want < pages*95/100 {
				t.Fatalf("maj_flt %d for %d pages: the memory was not paged out, the test proves nothing", want, pages)
			}
			testenv.Figure(t, "faults "+tc.name, "%+.1f%% of maj_flt (%d)", 100*(float64(got.Total())-float64(want))/float64(want), want)
			if !within(got.Total(), want, 0.02) {
				t.Errorf("bpf major faults %d, /proc maj_flt %d: more than 2%% apart", got.Total(), want)
			}
			kind := tc.kind
			if tc.mode == "cow" && !p.FileKindsExact() {
				// Before Linux 6.10 (no mm_filemap_fault) these count as
				// file, as the probe's status says.
				kind = readout.File
			}
			if got[kind] < got.Total()*95/100 {
				t.Errorf("kind %s is %d of %d faults, want at least 95%%", kind, got[kind], got.Total())
			}
			// The mapping's class is remembered: a lookup per mapping and
			// address-space change, not per fault. Only a case whose own
			// faults are swap-backed says so: elsewhere the swap-backed
			// faults are the child's few strays, each in a mapping of its
			// own.
			if swapBacked := got.SwapIns(); kind != readout.File && lookups > 16+swapBacked/100 {
				t.Errorf("%d mapping lookups for %d swap-backed faults: the cache does not hold", lookups, swapBacked)
			}
			lat := after.Latency[kind.String()].Count() - before.Latency[kind.String()].Count()
			if lat < got[kind]*98/100 {
				t.Errorf("%s latency histogram grew by %d for %d faults, want at least 98%%: a fault's start must survive the switch out", kind, lat, got[kind])
			}
		})
	}
}

// Each kind of major fault in an address space of 9,000 mappings, where
// nearly every fault is in a mapping the cache has not seen: each is
// looked up in the address space's index (bpf_find_vma, or the portable
// way's walk of a tree four levels deep), and must find the right mapping.
func TestMajorFaultKindsInADeepAddressSpace(t *testing.T) {
	testenv.RequireSwap(t)
	p := loadForTest(t)
	page := os.Getpagesize()
	cg := testenv.MemoryCgroup(t, 24<<20)
	c := startChild(t, "deep", testenv.UncachedFile(t, deepKinds*2*page))
	if err := cg.Add(c.pid()); err != nil {
		t.Fatal(err)
	}
	c.expect(t, "ready")
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", c.pid()))
	if err != nil {
		t.Fatal(err)
	}
	n := strings.Count(string(maps), "\n")
	if n < 3*deepKinds {
		t.Fatalf("the child has %d mappings, want at least %d: the mappings merged", n, 3*deepKinds)
	}
	for _, kind := range []readout.Kind{readout.Anon, readout.Shmem, readout.File} {
		before, after, got, want, ok := faultRound(t, p, c)
		if !ok {
			t.Fatal("the OOM killer took the child")
		}
		lookups := after.MappingLookups - before.MappingLookups
		t.Logf("%s in %d mappings: bpf anon=%d shmem=%d file=%d unknown=%d, maj_flt=%d, mapping lookups=%d",
			kind, n, got[readout.Anon], got[readout.Shmem], got[readout.File], got[readout.Unknown], want, lookups)
		// Swap readahead brings a mapping's second page in with the
		// first, and its neighbours' too: fewer faults than mappings.
		if want < deepKinds/4 {
			t.Fatalf("maj_flt %d for %d mappings: the memory was not paged out, the test proves nothing", want, deepKinds)
		}
		testenv.Figure(t, "faults in 9,000 mappings "+kind.String(), "%d of %d of their kind, %d unknown, %+.1f%% of maj_flt", got[kind], got.Total(), got[readout.Unknown],
			100*(float64(got.Total())-float64(want))/float64(want))
		if !within(got.Total(), want, 0.02) {
			t.Errorf("bpf major faults %d, /proc maj_flt %d: more than 2%% apart", got.Total(), want)
		}
		if got[kind] < got.Total()*99/100 {
			t.Errorf("kind %s is %d of %d faults, want at least 99%%", kind, got[kind], got.Total())
		}
		if kind != readout.File && lookups < got[kind]/2 {
			t.Errorf("%d mapping lookups for %d faults in as many mappings: the test does not exercise the lookup", lookups, got[kind])
		}
	}
}

// Kernels before 5.15 have no BPF links for perf events: the programs are
// attached by PERF_EVENT_IOC_SET_BPF there, taken here on this kernel, and
// count every major fault the same.
func TestPerfEventsAttachedWithoutLinks(t *testing.T) {
	perfEventLinks = false
	t.Cleanup(func() { perfEventLinks = true })
	p := loadForTest(t)
	if !p.perf.ioctl || !p.sampling.events.ioctl {
		t.Fatal("the events were attached by link")
	}
	const size = 8 << 20
	c := startChild(t, "file", testenv.UncachedFile(t, size))
	c.expect(t, "ready")
	_, _, got, want, ok := faultRound(t, p, c)
	if !ok {
		t.Fatal("the child was killed")
	}
	t.Logf("bpf file=%d of %d, maj_flt=%d", got[readout.File], got.Total(), want)
	if want < size/uint64(os.Getpagesize())*9/10 || !within(got.Total(), want, 0.02) || got[readout.File] < got.Total()*95/100 {
		t.Errorf("attached by ioctl: %d major faults (%d file) against maj_flt %d", got.Total(), got[readout.File], want)
	}
}

// cachedFile makes a disk file of size bytes whose pages are all in the page
// cache, so that writing to a private mapping of it copies them without a
// read: minor faults.
func cachedFile(t *testing.T, size int) string {
	t.Helper()
	path := testenv.UncachedFile(t, size)
	if _, err := os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// tmpfsFile makes a file of size bytes in /dev/shm, removed when the test
// ends.
func tmpfsFile(t *testing.T, size int) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Fatalf("/dev/shm is not a tmpfs (%v): the shmem shape needs one", err)
	}
	f, err := os.CreateTemp("/dev/shm", "thrashscope-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// Each major fault's service time, from its entry to its accounting,
// against the faulting process's own timing as the scheduler counted it:
// the child does nothing in the round but fault on an uncached file, one
// page at a time, so its faults' total time lies between the time it was
// blocked (the round's wall time less what its threads ran and waited to
// run, schedstat; less 10 % for its waits on the pipe that starts and ends
// the round) and the round's wall time, both the scheduler's clocks: a mean
// off by a good part either way fails. The child is in a cgroup of its own, so the
// cgroup's histogram (cgroup_major_fault_latency_seconds) is held to the
// same bounds and to its faults; the host's histogram has the faults of
// every other process too, so it is held to its count only.
func TestMajorFaultLatencyIsTimed(t *testing.T) {
	p := loadCgroupsForTest(t)
	g := testenv.UnifiedGroup(t, "latency", false)
	const size = 8 << 20
	c := startChild(t, "file", testenv.UncachedFile(t, size))
	if err := g.Add(c.pid()); err != nil {
		t.Fatal(err)
	}
	id := groupID(t, g)
	c.expect(t, "ready")
	m0 := majFlt(t, c.pid())
	before, err := readArmed(p)
	if err != nil {
		t.Fatal(err)
	}
	sched0, t0 := testenv.SchedTimes(t, c.pid()), time.Now()
	if !c.runPhase(t, -1) {
		t.Fatal("the file-fault child was killed")
	}
	wall := time.Since(t0)
	sched := testenv.SchedTimes(t, c.pid()).Sub(sched0)
	after, err := readArmed(p)
	if err != nil {
		t.Fatal(err)
	}
	majflt := majFlt(t, c.pid()) - m0
	blocked := sched.Blocked(wall)
	if pages := uint64(size / os.Getpagesize()); majflt < pages*9/10 {
		t.Fatalf("the child's maj_flt grew by %d over %d uncached pages: the file was cached, the test proves nothing", majflt, pages)
	}

	host := after.Latency[readout.KindFile].Count() - before.Latency[readout.KindFile].Count()
	if host < majflt*98/100 {
		t.Errorf("the host's file latency histogram grew by %d for the child's %d file faults", host, majflt)
	}
	cb, ca := before.Cgroups[id].Latency, after.Cgroups[id].Latency
	n := ca.Count() - cb.Count()
	sum := time.Duration((ca.SumSeconds - cb.SumSeconds) * float64(time.Second))
	t.Logf("child: %d faults in %v, blocked %v (ran %v, waited %v); its cgroup's histogram: %d faults, %v in all, mean %v",
		majflt, wall.Round(time.Microsecond), blocked.Round(time.Microsecond), sched.Ran.Round(time.Microsecond), sched.Waited.Round(time.Microsecond),
		n, sum.Round(time.Microsecond), (sum / time.Duration(max(n, 1))).Round(100*time.Nanosecond))
	if !within(n, majflt, 0.02) {
		t.Errorf("the child's cgroup's latency histogram counted %d faults, its maj_flt %d: more than 2%% apart", n, majflt)
	}
	testenv.Figure(t, "fault latency", "%.0f%% of the child's blocked time (%v over %d faults), %.0f%% of the round's wall time", 100*sum.Seconds()/blocked.Seconds(), blocked.Round(time.Millisecond), majflt, 100*sum.Seconds()/wall.Seconds())
	if sum < blocked*9/10 || sum > wall {
		t.Errorf("the child's faults took %v by its cgroup's histogram; it was blocked %v of the round's %v: want from 90 %% of the first to the second", sum, blocked, wall)
	}
	// The process's own total (the working set's demand counts it as time
	// not its own) is the same faults' time, held to the same bounds.
	own := after.Processes[uint32(c.pid())].FaultService - before.Processes[uint32(c.pid())].FaultService
	if own < blocked*9/10 || own > wall || !within(uint64(own), uint64(sum), 0.02) {
		t.Errorf("the child's faults took %v by its own total, %v by its cgroup's histogram; it was blocked %v of the round's %v: want the two within 2 %%, from 90 %% of the blocked time to the wall time", own, sum, blocked, wall)
	}
}

// The memory stall of a process thrashing alone in its cgroup, against the
// kernel's PSI "some" total of a cgroup2 group holding only it: within
// 20 %. For one thread on one CPU, PSI's some is exactly the time
// in_memstall is set (the child pins itself: see pinToOneCPU).
//
// The anon shape rewrites a region a quarter over its limit: at 2.7 times
// the limit the memcg OOM-killed the writer in about one run of six here,
// with swap free (every page on the active list, reclaim finding nothing
// to take in 16 tries), which ends the measurement, not what it measures.
func TestMemoryStallAgreesWithPSI(t *testing.T) {
	testenv.RequireSwap(t)
	for _, tc := range []struct {
		name, mode string
		limit      int64
		arg        func(t *testing.T) string
	}{
		{name: "anon", mode: "thrash", limit: 64 << 20, arg: func(*testing.T) string { return strconv.Itoa(80 << 20) }},
		{name: "file", mode: "thrash-file", limit: 48 << 20, arg: func(t *testing.T) string { return testenv.UncachedFile(t, 128<<20) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loadForTest(t)
			var c *child
			var pg *testenv.PressureGroup
			var psi0, wall time.Duration
			var before readout.Snapshot
			var sched testenv.ThreadTimes
			for try := 1; ; try++ {
				cg := testenv.MemoryCgroup(t, tc.limit)
				pg = testenv.NewPressureGroup(t, cg)
				c = startChild(t, tc.mode, tc.arg(t))
				for _, g := range []*cgroup.Cgroup{cg.Cgroup, pg.Cgroup} {
					if err := g.Add(c.pid()); err != nil {
						t.Fatal(err)
					}
				}
				c.expect(t, "ready")
				psi0 = pg.MemorySomeTotal(t)
				var err error
				if before, err = readArmed(p); err != nil {
					t.Fatal(err)
				}
				sched0, t0 := testenv.SchedTimes(t, c.pid()), time.Now()
				if c.runPhase(t, 9*time.Second) {
					wall, sched = time.Since(t0), testenv.SchedTimes(t, c.pid()).Sub(sched0)
					break
				}
				if try == oomTries {
					t.Fatalf("the OOM killer took the writer in all %d tries", oomTries)
				}
			}
			psi := pg.MemorySomeTotal(t) - psi0
			after, err := readArmed(p)
			if err != nil {
				t.Fatal(err)
			}
			b, a := before.Processes[uint32(c.pid())].Stall, after.Processes[uint32(c.pid())].Stall
			got := a.Total() - b.Total()
			t.Logf("%s: stall %v (off CPU %v, reclaim %v, sampled %v), PSI some %v, maj_flt %d",
				tc.name, got, a.OffCPU-b.OffCPU, a.Reclaim-b.Reclaim, a.Sampled-b.Sampled, psi, majFlt(t, c.pid()))
			if psi < 30*time.Millisecond {
				t.Fatalf("PSI some grew by %v only: the process did not stall, the test proves nothing", psi)
			}
			testenv.Figure(t, "stall "+tc.name, "%+.0f%% of PSI some (%v)", 100*(got-psi).Seconds()/psi.Seconds(), psi.Round(time.Millisecond))
			if diff := got - psi; diff.Abs() > psi/5 {
				t.Errorf("stall %v against PSI some %v: %+.0f%%, want within 20%%", got, psi, 100*diff.Seconds()/psi.Seconds())
			}
			checkStallParts(t, a.Sub(b), psi, sched, wall)
		})
	}
}

// checkStallParts holds the parts of a stall to what the scheduler
// counted of the stalled tasks over the same span (schedstat): the stall
// on CPU is time they ran, the stall off CPU time the stalled thread did
// not run (the probe counts a stalled task's every switch-out, a
// preemption too: on 6.12 under TCG a stall was 459 ms off CPU while its
// task was blocked 339 ms and waited 272 ms to run), and since the whole
// is PSI's some (within 20 %), the part off CPU is at least that less all
// they ran. Bounds from the kernel's own clocks, so an off-CPU series off
// by a factor fails one of them. The stalled thread is each process's
// busiest, the one that faults; the runtime's other threads run too (0.6 s
// of 6.4 s on 5.10 under TCG), time the stalled one may spend off CPU.
// wall is 0 where the tasks were not all busy through the span (time not
// run then says nothing).
func checkStallParts(t *testing.T, s readout.StallTime, psi time.Duration, sched testenv.ThreadTimes, wall time.Duration) {
	t.Helper()
	const slack = 5 * time.Millisecond
	on, off := s.OnCPU(), s.OffCPU
	notRun := max(0, wall-sched.Busiest)
	t.Logf("stall on CPU %v of %v run; off CPU %v, PSI some %v, busiest thread not run %v of %v (it ran %v; %v waiting to run in all)", on, sched.Ran, off, psi, notRun, wall, sched.Busiest, sched.Waited)
	if on > sched.Ran*21/20+slack {
		t.Errorf("stall on CPU %v, but the tasks ran %v in all", on, sched.Ran)
	}
	if wall > 0 && off > notRun*21/20+slack {
		t.Errorf("stall off CPU %v, but the stalled thread was off CPU %v at most (%v of wall time, it ran %v)", off, notRun, wall, sched.Busiest)
	}
	if low := psi*4/5 - sched.Ran; off < low-slack {
		t.Errorf("stall off CPU %v, under PSI some %v less 20 %% and all the %v the tasks ran", off, psi, sched.Ran)
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
	var thrash *child
	var started time.Time
	for try := 1; ; try++ {
		started = time.Now()
		thrash = startChild(t, "thrash", strconv.Itoa(5*limit/4))
		if err := cg.Add(thrash.pid()); err != nil {
			t.Fatal(err)
		}
		thrash.expect(t, "ready")
		if thrash.runPhase(t, 3*time.Second) {
			break
		}
		if try == oomTries {
			t.Fatalf("the OOM killer took the writer in all %d tries", oomTries)
		}
	}

	snap, err := readArmed(p)
	if err != nil {
		t.Fatal(err)
	}
	alive := time.Since(started)
	stalled := snap.Processes[uint32(thrash.pid())].Stall.Total()
	calm := snap.Processes[uint32(idle.pid())].Stall.Total()
	t.Logf("memory stall over 3 s: thrashing %v (alive %v), idle %v, maj_flt %d", stalled, alive.Round(time.Millisecond), calm, majFlt(t, thrash.pid()))
	if stalled < 20*time.Millisecond { // 90-410 ms seen on a 2-core VM
		t.Errorf("thrashing process stalled %v, want at least 20ms", stalled)
	}
	// One thread faults; the others (the Go runtime's) barely touch
	// memory: the sum over its threads stays within its own lifetime.
	if stalled > alive {
		t.Errorf("thrashing process stalled %v, more than the %v it has been alive", stalled, alive.Round(time.Millisecond))
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
	snap, err := readArmed(p)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Processes[pid].MajorFaults.Total() == 0 {
		t.Fatal("child took no major faults")
	}
	c.in.Close()
	if err := c.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if snap, err = readArmed(p); err != nil {
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
	p, err := loadWay(t, Options{Calm: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.LatencyArmed() {
		t.Fatal("fault-entry hooks attached at load, before any major fault")
	}
	for _, st := range p.Status() {
		if st.Name == readout.FaultLatency && !st.Attached {
			t.Fatalf("fault_latency down at load: %v", st.Err)
		}
	}
	c := startChild(t, "file", testenv.UncachedFile(t, 1<<20))
	c.expect(t, "ready")
	c.send(t, "go")
	c.expect(t, "done")
	// Read only reads; Arm, after it, attaches.
	if _, err := p.Read(); err != nil {
		t.Fatal(err)
	}
	if p.LatencyArmed() {
		t.Fatal("fault-entry hooks attached by a Read: reading must not attach anything")
	}
	snap, err := p.Read()
	if err != nil {
		t.Fatal(err)
	}
	p.Arm(time.Now(), snap)
	if !p.LatencyArmed() {
		t.Fatal("fault-entry hooks not attached after major faults")
	}
	// Faults taken while disarmed are not timed, and not counted lost.
	if lost := snap.Lost[readout.FaultLatency]; lost > 10 {
		t.Errorf("%d fault starts counted lost while disarmed, want none beyond a few in flight", lost)
	}
	// Other processes may take a major fault at any moment, so look for a
	// read that saw none rather than assume the next one does.
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		if _, err := readArmed(p); err != nil {
			t.Fatal(err)
		}
		if !p.LatencyArmed() {
			return
		}
	}
	t.Error("fault-entry hooks still attached after 50 reads with a 1 ns calm period")
}

// readArmed reads the maps and then arms the on-demand hooks for what it
// read, as the sampler does each interval.
func readArmed(p *Probe) (readout.Snapshot, error) {
	snap, err := p.Read()
	if err == nil {
		p.Arm(time.Now(), snap)
	}
	return snap, err
}

// portableTests are the tests TestThePortableWayHere runs again in the
// portable way: the probes against the kernel's own figures.
var portableTests = []string{
	"TestMajorFaultKindsAgreeWithMajFlt", "TestMajorFaultKindsInADeepAddressSpace", "TestMemoryStallAgreesWithPSI",
	"TestProcessExitClearsCounters", "TestMajorFaultLatencyIsTimed", "TestLatencyHooksFollowMajorFaults",
	"TestCgroupCountersAgreeWithTheKernel", "TestWakesWhenFaultsBegin",
}

// The portable way is what kernels before 5.17 run, and the matrix boots
// one only now and then: this kernel runs it too, with every test above
// forced to it, so that a change cannot break it unseen.
func TestThePortableWayHere(t *testing.T) {
	testenv.RequirePrivileged(t)
	if os.Getenv(wayEnv) != "" {
		t.Log("already in a forced way: the tests above are what runs")
		return
	}
	// As New does: before 5.11 the way's own feature probes are charged to
	// RLIMIT_MEMLOCK (a 5.10 guest refused one with EPERM when this step
	// ran alone, no test before it having raised the limit).
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	if own, why, err := chooseWay(WayAuto, fastNeeds); err != nil {
		t.Fatal(err)
	} else if own == WayPortable {
		testenv.NotApplicable(t, "this kernel's own way is the portable one ("+why+")", strings.Join(portableTests, ", "))
	}
	cmd := exec.Command(os.Args[0], "-test.v", "-test.count=1", "-test.run", "^("+strings.Join(portableTests, "|")+")$")
	cmd.Env = append(os.Environ(), wayEnv+"="+string(WayPortable))
	out, err := cmd.CombinedOutput()
	results := goTestResults(string(out))
	for _, name := range portableTests {
		if r := results[name]; r != "PASS" {
			t.Errorf("%s in the portable way: %q, want PASS", name, r)
		}
	}
	if err != nil || t.Failed() {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		t.Fatalf("the portable way's run failed (%v); its last lines:\n%s", err, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
	if !strings.Contains(string(out), "the portable way: as --probes.way asks") {
		t.Error("the run does not say it took the portable way")
	}
}

// goTestResults are the top-level tests' results in go test -v output.
func goTestResults(out string) map[string]string {
	res := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "---" && !strings.Contains(f[2], "/") {
			res[f[2]] = strings.TrimSuffix(f[1], ":")
		}
	}
	return res
}
