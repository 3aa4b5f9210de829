package workload

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	promprocfs "github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// swapperEnv makes the test binary a child that fills a region of the
// size it names with pages no swap compresses, reads every page back
// once, says "done" and waits for its stdin to close.
const swapperEnv = "THRASHSCOPE_WORKLOAD_TEST_SWAPPER"

func TestMain(m *testing.M) {
	if size := os.Getenv(swapperEnv); size != "" {
		if err := swapper(size); err != nil {
			fmt.Fprintln(os.Stderr, "swapper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func swapper(size string) error {
	n, err := strconv.Atoi(size)
	if err != nil {
		return err
	}
	// Once the parent has put it in its cgroups: memory is charged where
	// it is first touched.
	in := bufio.NewReader(os.Stdin)
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		return err
	}
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	testenv.RandomFill(mem)
	var sum byte
	for i := 0; i < len(mem); i += os.Getpagesize() {
		sum += mem[i]
	}
	fmt.Println("done", sum)
	_, _ = in.ReadString('\n')
	return nil
}

// memcgBatch is how many events a CPU keeps before it folds them into its
// memory cgroup's counts.
const memcgBatch = 32

// A workload's readings of its own cgroup files, on the real kernel, held
// to what the kernel says of the one process in the group through its own
// files (/proc/<pid>/status and stat): the cgroup's swap, which on cgroup
// v1 is derived (memsw less usage), is the process's VmSwap (less the
// pages read ahead into the swap cache it has not touched; on v2, the
// slots of its swap cache too); its usage holds the process's anonymous
// memory; its pgmajfault is the process's maj_flt, and its retries; its
// refaults are anonymous; its limits are the one set. The process fills half again the
// limit and reads it back, so part of it is in swap.
func TestReadKernelAgreesWithTheProcess(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	const limit = 32 << 20
	mem := testenv.MemoryCgroup(t, limit)
	psi := testenv.NewPressureGroup(t, mem)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), swapperEnv+"="+strconv.Itoa(limit*3/2))
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
	t.Cleanup(func() { in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	lines := make(chan string, 2)
	go func() {
		r := bufio.NewReader(out)
		for range 2 {
			line, _ := r.ReadString('\n')
			lines <- line
		}
	}()
	select {
	case line := <-lines:
		if line != "ready\n" {
			t.Fatalf("the child said %q", line)
		}
	case <-time.After(time.Minute):
		t.Fatal("the child did not start in a minute")
	}
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []*cgroup.Cgroup{mem.Cgroup, psi.Cgroup} {
		if err := g.Add(pid); err != nil {
			t.Fatal(err)
		}
	}
	// What its runtime held before it joined is charged where it started;
	// read once it has joined, idle, it is at most what it holds now (a
	// page it touched between a read before the join and the join was
	// neither: 76 KiB on 6.1).
	own0, _ := anonymous(t, pid)
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "done") {
			t.Fatalf("the child said %q", line)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the child did not fill and read back its region in 2 minutes")
	}
	p, err := fs.Process(pid)
	own, swap := anonymous(t, pid)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{V2: psi.Path}
	if !mem.V2 {
		f.V1Memory = mem.Path
	}
	k := ReadKernel(f)
	t.Logf("cgroup: current %d KiB, swap %d KiB, max %d KiB, limit %d KiB, pgmajfault %d, refaults %v, events %v; process: own resident %d KiB, swap %d KiB, maj_flt %d; missing %v",
		k.CurrentBytes>>10, k.SwapBytes>>10, k.MaxBytes>>10, k.LimitBytes>>10, k.MajorFaults, k.Refaults, k.Events, own>>10, swap>>10, p.MajorFaults, k.Missing)
	if len(k.Missing) > 0 {
		t.Errorf("readings left out: %v", k.Missing)
	}
	if swap < limit/4 || p.MajorFaults < 1000 {
		t.Fatalf("the child has %d KiB in swap and %d major faults: it did not swap, the test proves nothing", swap>>10, p.MajorFaults)
	}
	// The group holds only the child. On v1 its swap (memsw less usage)
	// is the pages only in swap, the child's VmSwap: v1 drops a page's
	// swap charge when the page is read back, or read ahead. On v2 memory.swap.current
	// is the slots the group holds, and a page read back keeps its slot
	// while it stays in the swap cache: from VmSwap up to VmSwap and all
	// the child's own resident pages.
	if mem.V2 {
		if lo, hi := int64(swap)-(1<<20), int64(swap+own)+(1<<20); k.SwapBytes < lo || k.SwapBytes > hi {
			t.Errorf("the cgroup's swap.current %d KiB: want from its one process's VmSwap %d KiB to that and its own resident %d KiB", k.SwapBytes>>10, swap>>10, own>>10)
		}
	} else {
		// A page swap readahead brought back that the process has not
		// touched is in the swap cache, charged as usage, while its page
		// table still holds the swap entry VmSwap counts: the cgroup's
		// swap is VmSwap less at most the host's swap cache (SwapCached;
		// 1.9 MiB of 18 MiB once here, under another test's load).
		host, err := promprocfs.NewFS("/proc")
		if err != nil {
			t.Fatal(err)
		}
		mi, err := host.Meminfo()
		if err != nil || mi.SwapCachedBytes == nil {
			t.Fatalf("/proc/meminfo: no SwapCached (%v)", err)
		}
		cached := int64(*mi.SwapCachedBytes)
		if lo, hi := int64(swap)-cached-(1<<20), int64(swap)+(1<<20); k.SwapBytes < lo || k.SwapBytes > hi {
			t.Errorf("the cgroup's swap (memsw less usage) %d KiB: want its one process's VmSwap %d KiB, less at most the host's swap cache %d KiB", k.SwapBytes>>10, swap>>10, cached>>10)
		}
	}
	// Its runtime's first pages were charged where it started, before it
	// joined the group: what it holds now is at most those and what the
	// group holds (a fixed allowance of 6 MiB for them was passed on 6.1).
	if pre := int64(own0); k.CurrentBytes < int64(own)-pre || k.CurrentBytes > limit {
		t.Errorf("the cgroup's usage %d KiB: want its process's own resident %d KiB less the %d KiB it held before it joined, or more, and no more than the %d KiB limit",
			k.CurrentBytes>>10, own>>10, pre>>10, limit>>10)
	}
	// pgmajfault counts each read of a swap-in fault, maj_flt each fault
	// once: a fault retried after its page was taken again while it waited
	// (a small group under pressure) reads twice. And the group's counts
	// may lag behind: each CPU keeps up to a batch of its events before it
	// folds them into the group's (MEMCG_CHARGE_BATCH, 32 before 6.x's
	// flushing rework: 31 of 1,450 behind once on 5.10), so the lag is a
	// count, not a share.
	under := max(0.02*float64(p.MajorFaults), float64(memcgBatch*runtime.NumCPU()))
	if under > 0.1*float64(p.MajorFaults) {
		// On a host of many CPUs the batches could hide most of the
		// count, and the bound below would hold nothing.
		t.Fatalf("%d CPUs may each hold back %d faults, %.0f of the process's %d: the count cannot be held to the kernel's here; make the child fault more",
			runtime.NumCPU(), memcgBatch, under, p.MajorFaults)
	}
	if !k.HasMajorFaults || float64(k.MajorFaults) < float64(p.MajorFaults)-under || float64(k.MajorFaults) > 1.1*float64(p.MajorFaults) {
		t.Errorf("the cgroup's pgmajfault %d (read %v), its process's maj_flt %d: want from %.0f under to 10 %% over", k.MajorFaults, k.HasMajorFaults, p.MajorFaults, under)
	}
	if k.MaxBytes != limit || k.LimitBytes != limit {
		t.Errorf("the cgroup's max %d, the limit it lives under %d: want the %d set", k.MaxBytes, k.LimitBytes, limit)
	}
	// Reading back pages evicted a moment ago refaults them (their
	// shadows are fresh), and they are anonymous.
	if k.Refaults["anon"] == 0 || k.Refaults["anon"] < k.Refaults["file"] {
		t.Errorf("refaults %v: want the anonymous pages the process read back from swap", k.Refaults)
	}
	if k.Events["oom_kill"] != 0 {
		t.Errorf("events %v: an OOM kill under the guard", k.Events)
	}
	if !k.HasPressure || k.Pressure.Some <= 0 {
		t.Errorf("pressure %+v (read %v): want the stall of a process that swapped", k.Pressure, k.HasPressure)
	}
}

// anonymous is a process's anonymous memory resident and in swap, from
// smaps_rollup: a walk of its page tables, exact, where status's RssAnon
// and VmSwap are counters each thread syncs every 64 faults before Linux
// 6.2 (off by 1.4 MiB once on 6.1 and 5.10).
func anonymous(t *testing.T, pid int) (resident, swapped uint64) {
	t.Helper()
	p, err := promprocfs.NewProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.ProcSMapsRollup()
	if err != nil {
		t.Fatal(err)
	}
	return r.Anonymous, r.Swap
}
