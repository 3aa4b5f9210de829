package runner_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// The policies' tests run real loadgen runs under a policy and watch the
// kernel while they run: cgroup.events says who is frozen,
// /proc/<pid>/stat whether a process ran, /proc/<pid>/smaps what of its
// region is resident and locked.

// startPolicyRun starts loadgen run with args and --out; the returned
// function waits for it and returns its record.
func startPolicyRun(t *testing.T, args ...string) (*loadgenRun, func() run.Record) {
	t.Helper()
	r := startLoadgenRun(t, args...)
	return r, func() run.Record {
		t.Helper()
		<-r.exited
		if r.err != nil {
			t.Fatalf("loadgen run: %v\n%s", r.err, r.stderr.String())
		}
		rec, _ := testenv.OnlyRecord(t, r.out)
		return rec
	}
}

// loadgenRun is a loadgen run a test started.
type loadgenRun struct {
	cmd    *exec.Cmd
	out    string // its --out
	stderr *strings.Builder
	// exited is closed when it has exited and err is its Wait's.
	exited chan struct{}
	err    error
}

// startLoadgenRun starts loadgen run with args, its --out a new directory,
// and kills it (its consumers die with it) when the test ends.
func startLoadgenRun(t *testing.T, args ...string) *loadgenRun {
	t.Helper()
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	r := &loadgenRun{out: t.TempDir(), stderr: &strings.Builder{}, exited: make(chan struct{})}
	r.cmd = exec.Command(testenv.Binary(t, "loadgen"), append([]string{"run", "--out=" + r.out}, args...)...)
	r.cmd.Stderr = r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() { _ = r.cmd.Process.Kill(); <-r.exited })
	return r
}

// ended reports whether the run has exited.
func (r *loadgenRun) ended() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// freezeGroups are the consumers' cgroup v2 groups of the run loadgen pid
// is making, in the unified hierarchy: the freeze groups where memory is
// on v1, the run's own sub-cgroups on v2.
func freezeGroups(t *testing.T) []string {
	t.Helper()
	p, err := cgroup.OwnUnified("/proc")
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(p.Path, cgroup.Prefix+"run-*", cgroup.Prefix+"consumer-*"))
	return dirs
}

func frozen(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	return err == nil && strings.Contains(string(b), "frozen 1")
}

func groupPID(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// ranNanos is the CPU time all of a process's threads have run, in ns
// (/proc/<pid>/task/*/schedstat: exact, where /proc/<pid>/stat counts in
// ticks and a few µs can carry it over a tick's edge); -1 once it is gone.
func ranNanos(pid int) int64 {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if len(files) == 0 {
		return -1
	}
	var sum int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		fields := strings.Fields(string(b))
		if err != nil || len(fields) == 0 {
			return -1
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return -1
		}
		sum += n
	}
	return sum
}

// regionOf reads the mapping of exactly size bytes (the consumer's region)
// from /proc/<pid>/smaps: its Rss and Locked in bytes, and its VmFlags.
func regionOf(pid int, size int64) (rss, locked int64, flags string, ok bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, 0, "", false
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, isRange := testenv.VMARange(line); isRange {
			if in {
				return rss, locked, flags, true
			}
			in = int64(hi-lo) == size
			continue
		}
		if !in {
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		kb := func() int64 { n, _ := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64); return n << 10 }
		switch k {
		case "Rss":
			rss = kb()
		case "Locked":
			locked = kb()
		case "VmFlags":
			flags = " " + v + " "
		}
	}
	return rss, locked, flags, in
}

// leftBehind fails the test for any consumer alive or frozen group left.
func leftBehind(t *testing.T, rec run.Record) {
	t.Helper()
	testenv.NoneAlive(t, rec)
	if g := freezeGroups(t); len(g) > 0 {
		t.Errorf("freeze groups left behind: %v", g)
	}
}

// watchFrozen polls the run's freeze groups until one has been frozen for
// a while, and checks that its consumer ran (next to) nothing meanwhile
// and that its region was paged out. It watches as long as the run lasts: under TCG a
// run is twenty times slower, its first freeze minutes in.
func watchFrozen(t *testing.T, r *loadgenRun, size int64) {
	t.Helper()
	start := time.Now()
	for {
		select {
		case <-r.exited:
			t.Fatalf("no consumer seen frozen through the run's %s (%v)\n%s", time.Since(start).Round(time.Second), r.err, r.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		for _, g := range freezeGroups(t) {
			if !frozen(g) {
				continue
			}
			pid := groupPID(g)
			before := ranNanos(pid)
			stayed := stayedFrozen(g, 300*time.Millisecond)
			after := ranNanos(pid)
			rss, _, _, ok := regionOf(pid, size)
			if !stayed || before < 0 || after < 0 || !ok {
				continue // thawed meanwhile, or ended: not a clean look
			}
			// A frozen task sits in the freezer's trap; a wake there
			// (a signal) runs it for microseconds before it traps again.
			// A consumer left running runs milliseconds in 300 ms.
			if ran := time.Duration(after - before); ran > frozenRunAllowance {
				t.Errorf("%s: frozen, its consumer (pid %d) still ran %v of CPU in 300 ms, want at most %v", g, pid, ran, frozenRunAllowance)
			} else {
				t.Logf("%s: frozen 300 ms, its consumer (pid %d) ran %v", g, pid, ran)
			}
			if rss > size/4 {
				t.Errorf("%s: frozen 300 ms, its consumer's region has %d KiB resident of %d KiB, want it paged out (under a quarter)", g, rss>>10, size>>10)
			}
			return
		}
	}
}

// frozenRunAllowance bounds what a frozen consumer may run in the 300 ms
// watch: a tenth of a tick.
const frozenRunAllowance = time.Millisecond

// stayedFrozen looks at a freeze group every 10 ms for d, and reports
// whether the kernel said it frozen at every look: a thaw and a refreeze
// between two looks 300 ms apart would go unseen.
func stayedFrozen(g string, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if !frozen(g) {
			return false
		}
	}
	return frozen(g)
}

// syn8Args is SYN8 at 1.5 × the limit's demand: 25 × 8 MB in 128 MiB.
var syn8Args = []string{"--preset=syn8", "--consumers=25", "--cycles=500"}

// binpack freezes the bins that are not running and pages them out, and
// packs the consumers by their own memory: SYN8 at 1.5 × demand (25 × 8 MB,
// each with its runtime's few MB of its own, in 96 MiB bins) takes three
// bins, where counting each consumer's share of the binary's text in its
// size made four. Whether it saves swap-ins is the committed comparisons'
// finding, held at every commit by TestCommittedComparisonsKeepTheirDirections.
func TestBinPackFreezesAndPagesOut(t *testing.T) {
	r, wait := startPolicyRun(t, append(syn8Args, "--policy=binpack")...)
	watchFrozen(t, r, 8_000_000/4096*4096)
	rec := wait()
	if rec.State != run.StateCompleted {
		t.Fatalf("run %s (%s), want completed", rec.State, rec.Reason)
	}
	kinds := map[string]int{}
	bins := 0
	for _, d := range rec.Decisions {
		kinds[d.Kind]++
		if d.Error != "" {
			t.Errorf("decision %+v failed", d)
		}
		var bin, of int
		if _, err := fmt.Sscanf(strings.TrimPrefix(d.Why, "out of "), "bin %d of %d", &bin, &of); err == nil {
			bins = max(bins, of)
		}
	}
	if kinds["freeze"] == 0 || kinds["thaw"] == 0 {
		t.Errorf("decisions %v, want freezes and thaws", kinds)
	}
	// Each consumer's own memory is its region and at most a few MiB
	// more; its file pages are the binary's, shared by all.
	own := rec.Spec.SizeBytes + 4<<20
	capacity := int64(policy.DefaultBinPack().Usable * float64(rec.Spec.MemoryLimitBytes))
	if want := (int64(rec.Spec.Consumers)*own + capacity - 1) / capacity; bins == 0 || int64(bins) > want {
		t.Errorf("binpack packed %d consumers of %d MB into up to %d bins, want at most %d (their own memory in %d MiB bins)", rec.Spec.Consumers, rec.Spec.SizeBytes/1_000_000, bins, want, capacity>>20)
	}
	leftBehind(t, rec)
	t.Logf("%d decisions, up to %d bins, makespan %.1f s", len(rec.Decisions), bins, rec.MakespanSeconds)
}

// tpf locks the protected consumer's region, whose resident pages then
// stay (smaps: VmFlags lo, Rss never falls while locked), and releases it.
// memoryMin is the memory.min of the cgroup v2 group pid is in; 0 without
// one (memory on v1).
func memoryMin(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			v, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup", rest, "memory.min"))
			n, _ := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
			return n
		}
	}
	return 0
}

// TPF protects one consumer at a time: where memory is on cgroup v2 with
// memory.min on its memory cgroup (the kernel's own protection), else with
// mlock on its region (VmFlags lo); either way reclaim takes none of its
// region while it is protected (its Rss does not fall), and every
// protection is released. memory.min stops reclaim from choosing the
// group's pages once it is written, not from finishing with those it had
// already taken off the LRU: a batch (MGLRU's 64 pages) for each task
// reclaiming then, each of the pair's consumers as it charges. So the Rss
// may fall by that much (docs/kernels.md). mlock has no such allowance:
// reclaim checks it again as it unmaps each page.
func TestTPFProtectsOneConsumer(t *testing.T) {
	// pair at a quarter: 2 × 50 MB in 64 MiB.
	const size = 12207 * 4096
	own, err := cgroup.Own("/proc")
	if err != nil {
		t.Fatal(err)
	}
	lever := "mlock"
	if own.V2 {
		lever = "memory.min"
	}
	inFlight := int64(0)
	if lever == "memory.min" {
		inFlight = 2 * 64 * 4096 // the pair's two consumers, a batch each
	}
	protected := func(pid int) bool {
		if lever == "memory.min" {
			return memoryMin(pid) >= size
		}
		_, _, flags, ok := regionOf(pid, size)
		return ok && strings.Contains(flags, " lo ")
	}
	// TPF protects while the detector says thrashing. Where swap is so
	// fast that the CPU never idles on it (a VM under TCG, its swap in the
	// host's page cache), that takes PSI memory full: at 1 % of an
	// interval, every thrash of this pair says it.
	r, wait := startPolicyRun(t, "--preset=pair", "--scale=0.25", "--cycles=400", "--policy=tpf", "--detector.psi-full=1")
	// Watched as long as the run lasts (under TCG, twenty times longer),
	// until one protection has been looked at minLooks times in a row.
	const minLooks = 3
	seen := false
	for !seen && !r.ended() {
		time.Sleep(20 * time.Millisecond)
		for name, pid := range testenv.ChildrenOf(r.cmd.Process.Pid) {
			// The cheap look first: a protection can be short.
			if !protected(pid) {
				continue
			}
			rss0, _, _, ok := regionOf(pid, size)
			if !ok {
				continue
			}
			// The allowance is spent as the Rss falls: what reclaim had
			// in hand when the protection came is taken once, so every
			// fall over the watch counts against it, even one the region
			// faulted back in between.
			looks, fell, seenAt, prev := 0, int64(0), time.Now(), rss0
			for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				rss, locked, _, ok := regionOf(pid, size)
				if !ok || !protected(pid) {
					break // released, or ended
				}
				looks++
				fell += max(0, prev-rss)
				prev = rss
				if fell > inFlight {
					t.Errorf("%s (pid %d), protected by %s: its region's Rss fell by %d KiB in all (now %d of %d KiB) by look %d, %s after the protection was seen: more than the %d KiB reclaim may have had in hand", name, pid, lever, fell>>10, rss>>10, rss0>>10, looks, time.Since(seenAt).Round(time.Millisecond), inFlight>>10)
					break
				}
				if lever == "mlock" && locked < rss*95/100 {
					t.Errorf("%s (pid %d), protected: %d KiB of its region locked of %d KiB resident, want all", name, pid, locked>>10, rss>>10)
				}
				rss0 = max(rss0, rss)
			}
			if looks < minLooks {
				continue // too short a protection to judge: watch for another
			}
			seen = true
			testenv.Figure(t, "tpf", "%s protected by %s, %d KiB resident kept over %d looks (fell by %d KiB in all)", name, lever, rss0>>10, looks, fell>>10)
			break
		}
	}
	if !seen {
		t.Errorf("no consumer seen protected by %s for %d looks in a row", lever, minLooks)
	}
	rec := wait()
	if rec.State != run.StateCompleted {
		t.Fatalf("run %s (%s), want completed", rec.State, rec.Reason)
	}
	if rec.Protection != lever {
		t.Errorf("the record says the protection was %q, want %q on this host", rec.Protection, lever)
	}
	kinds := map[string]int{}
	for _, d := range rec.Decisions {
		kinds[d.Kind]++
		if d.Error != "" {
			t.Errorf("decision %+v failed", d)
		}
	}
	if kinds["protect"] == 0 || kinds["release"] != kinds["protect"] {
		t.Errorf("decisions %v: want protections, each released", kinds)
	}
	leftBehind(t, rec)
}

// calmdown freezes and pages out the newest consumer while memory is low
// and paging high, and leaves nothing frozen.
func TestCalmDownStopsTheNewest(t *testing.T) {
	r, wait := startPolicyRun(t, append(syn8Args[:2:2], "--cycles=300", "--policy=calmdown")...)
	watchFrozen(t, r, 8_000_000/4096*4096)
	rec := wait()
	if rec.State != run.StateCompleted {
		t.Fatalf("run %s (%s), want completed", rec.State, rec.Reason)
	}
	var freezes int
	for _, d := range rec.Decisions {
		if d.Kind == "freeze" {
			freezes++
		}
		if d.Error != "" {
			t.Errorf("decision %+v failed", d)
		}
	}
	if freezes == 0 {
		t.Error("no freeze decision recorded")
	}
	leftBehind(t, rec)
}

// TestTheConsumerAloneCountsInTheRun: a run of fixed work first runs one
// consumer alone; it is the run's as much as the others are, so it is in
// the run's cgroup in both hierarchies (where memory is on v1, the run's
// group in the unified one is where the probes count its workload and its
// PSI is read). It once stayed in its parent's unified group, and a thrash
// by it was named as the observer's own workload.
func TestTheConsumerAloneCountsInTheRun(t *testing.T) {
	r := startLoadgenRun(t, "--preset=pair", "--scale=0.1", "--consumers=1", "--cycles=100000")
	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) || r.ended() {
			t.Fatalf("no consumer running alone within 30 s: children %v\n%s", testenv.ChildrenOf(r.cmd.Process.Pid), r.stderr.String())
		}
		for name, p := range testenv.ChildrenOf(r.cmd.Process.Pid) {
			if name == run.ConsumerName(1) {
				pid = p
			}
		}
	}
	var groups string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		groups = string(b)
		unified := ""
		for _, l := range strings.Split(groups, "\n") {
			if rest, ok := strings.CutPrefix(l, "0::"); ok {
				unified = rest
			}
		}
		if strings.Contains(unified, "/"+cgroup.Prefix+"run-") && strings.HasSuffix(unified, run.ConsumerName(1)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer alone (pid %d) is not in the run's unified group %s: /proc/%d/cgroup:\n%s", pid, run.ConsumerName(1), pid, groups)
		}
	}
}
