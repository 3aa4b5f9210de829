package observer

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// faultChildEnv makes the test binary a faulting child: it reads pages of
// the file its last argument names through a mapping, each a major fault
// (the page cache dropped first), from page first for n pages, once, or
// again and again until its stdin closes when n is 0 (the whole file).
const faultChildEnv = "THRASHSCOPE_TEST_FAULT_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(faultChildEnv); spec != "" {
		if err := faultChild(spec, os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, "fault child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// faultSink keeps the fault child's reads from being optimised away.
var faultSink byte

// faultChild: spec is "first,n".
func faultChild(spec, path string) error {
	var first, n int
	if _, err := fmt.Sscanf(spec, "%d,%d", &first, &n); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	page := os.Getpagesize()
	pass := func() error {
		mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
		if err != nil {
			return err
		}
		_ = unix.Madvise(mem, unix.MADV_RANDOM) // one fault a page, no readahead
		last := len(mem) / page
		if n > 0 {
			last = min(last, first+n)
		}
		var sum byte
		for p := first; p < last; p++ {
			sum += mem[p*page]
		}
		faultSink = sum // the loads must happen
		return unix.Munmap(mem)
	}
	if n > 0 {
		return pass()
	}
	stop := make(chan struct{})
	go func() { _, _ = bufio.NewReader(os.Stdin).ReadString('\n'); close(stop) }()
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		if err := pass(); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startInCgroup starts the test binary as a fault child in the cgroup dir.
func startInCgroup(t *testing.T, dir, spec, file string) *exec.Cmd {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cmd := exec.Command(os.Args[0], file)
	cmd.Env = append(os.Environ(), faultChildEnv+"="+spec)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	cmd.Stderr = os.Stderr
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting a fault child in %s: %v", dir, err)
	}
	return cmd
}

// cgroupSeries are the distinct cgroup labels of a metric in a scrape,
// with each series' whole label set.
func cgroupSeries(scrape, metric string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(scrape) {
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok {
			continue
		}
		labels := rest[:strings.LastIndex(rest, "}")]
		i := strings.Index(labels, `cgroup="`)
		if i < 0 {
			continue
		}
		v := labels[i+len(`cgroup="`):]
		if end := strings.Index(v, `",`); end >= 0 {
			v = v[:end]
		} else {
			v = v[:strings.LastIndex(v, `"`)] // the series' only label
		}
		out[v] = labels
	}
	return out
}

// TestWorkloadsFromRealCgroups: real nested cgroups shaped as a systemd
// unit and a Kubernetes container, and one with a hostile name, each with
// a faulting process, beside 1,000 cgroups that fault once: the scrape has
// at most --cgroup.top-k workloads, the three busy ones with the labels
// their paths give, the hostile one valid and every other series kept; a
// removed cgroup's series go.
func TestWorkloadsFromRealCgroups(t *testing.T) {
	testenv.RequirePrivileged(t)
	parent, err := cgroup.OwnUnified("/proc")
	if err != nil {
		t.Fatalf("no cgroup2 group of this process to make test groups under: %v", err)
	}
	root, err := parent.CreatePressureGroup(fmt.Sprintf("test-workloads-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	var children []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range children {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		removeTree(t, root.Path)
	})
	mk := func(rel string) string {
		t.Helper()
		dir := filepath.Join(root.Path, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	const uid = "3e1d7a2b-54c8-4f0e-9b1a-0c2d3e4f5a6b"
	cid := strings.Repeat("9f", 32)
	hostile := "bad\xff\"q name"
	rootRel := "/" + filepath.Base(root.Path)
	busy := map[string]string{ // cgroup label -> dir
		rootRel + "/system.slice/db-test.service":             mk("system.slice/db-test.service"),
		rootRel + "/kubepods/burstable/pod" + uid + "/" + cid: mk("kubepods/burstable/pod" + uid + "/" + cid),
		// as the exposition format writes it: U+FFFD for the bad byte, the quote escaped
		rootRel + `/hostile/bad�\"q name`: mk("hostile/" + hostile),
	}
	d := startDaemon(t, t.TempDir(), "--probes=bpf", "--cgroup.top-k=5")

	file := testenv.UncachedFile(t, 8<<20) // 2,048 pages
	busyChild := map[string]*exec.Cmd{}
	for label, dir := range busy {
		c := startInCgroup(t, dir, "0,0", file)
		children = append(children, c)
		busyChild[label] = c
	}
	// 1,000 cgroups that fault once each: two pages of the file apiece.
	many := mk("many")
	for i := range 1000 {
		dir := filepath.Join(many, fmt.Sprintf("c%04d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		c := startInCgroup(t, dir, fmt.Sprintf("%d,2", 2*i), file)
		if err := c.Wait(); err != nil {
			t.Fatalf("fault child %d: %v", i, err)
		}
	}

	var scrape string
	var major map[string]string
	began := time.Now()
	waitFor(t, 30*time.Second, "the three busy workloads in a scrape", func() bool {
		time.Sleep(500 * time.Millisecond)
		_, scrape = get(t, d.url+"/metrics")
		major = cgroupSeries(scrape, "thrashscope_cgroup_major_faults_total")
		for want := range busy {
			if _, ok := major[want]; !ok {
				if time.Since(began) > 25*time.Second {
					t.Logf("exported: %v; %d cgroup lines", slices.Sorted(maps.Keys(major)), strings.Count(scrape, "\nthrashscope_cgroup_major_faults_total{"))
				}
				return false
			}
		}
		return true
	})
	for i := 0; i < 10; i++ { // the bound holds at every scrape
		if len(major) > 5 {
			t.Fatalf("%d workloads exported, want at most --cgroup.top-k=5: %v", len(major), slices.Sorted(maps.Keys(major)))
		}
		time.Sleep(300 * time.Millisecond)
		_, scrape = get(t, d.url+"/metrics")
		major = cgroupSeries(scrape, "thrashscope_cgroup_major_faults_total")
	}
	unit := major[rootRel+"/system.slice/db-test.service"]
	pod := major[rootRel+"/kubepods/burstable/pod"+uid+"/"+cid]
	for _, want := range []string{`unit="db-test.service"`, `slice="system.slice"`} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit's labels {%s} lack %s", unit, want)
		}
	}
	for _, want := range []string{`pod_uid="` + uid + `"`, `container_id="` + cid + `"`, `qos="burstable"`} {
		if !strings.Contains(pod, want) {
			t.Errorf("the container's labels {%s} lack %s", pod, want)
		}
	}
	// A label the path does not give is left out, not sent empty.
	if strings.Contains(unit, "pod_uid=") || strings.Contains(pod, "unit=") {
		t.Errorf("labels the paths do not give: the unit's {%s}, the container's {%s}", unit, pod)
	}
	promtoolCheck(t, scrape)
	for _, name := range []string{"thrashscope_thrashing_state", "thrashscope_swap_in_pages_total", "thrashscope_cgroup_events_lost_total"} {
		if scrapeValue(scrape, name) < 0 {
			t.Errorf("%s missing from a scrape with a hostile cgroup name", name)
		}
	}

	// Each busy workload's count is its process's own, as the kernel
	// counted it (wait4's rusage): the processes stopped, the exported
	// counters once two scrapes agree, within 2 %.
	majflt := map[string]int64{}
	for label, c := range busyChild {
		_ = c.Process.Kill()
		_ = c.Wait()
		ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok || ru.Majflt < 1000 {
			t.Fatalf("busy child in %s: rusage %+v: want its thousands of major faults", label, c.ProcessState.SysUsage())
		}
		majflt[label] = ru.Majflt
	}
	children = nil
	prev := map[string]float64{}
	got := map[string]float64{}
	waitFor(t, 30*time.Second, "the busy workloads' counters steady in two scrapes", func() bool {
		time.Sleep(600 * time.Millisecond)
		_, scrape = get(t, d.url+"/metrics")
		steady := true
		for label := range busy {
			got[label] = cgroupSum(scrape, "thrashscope_cgroup_major_faults_total", label)
			steady = steady && got[label] > 0 && got[label] == prev[label]
		}
		maps.Copy(prev, got)
		return steady
	})
	for label, want := range majflt {
		testenv.Figure(t, "busy workload faults", "%.0f, its process's majflt %d (%+.1f%%)", got[label], want, 100*(got[label]-float64(want))/float64(want))
		if math.Abs(got[label]-float64(want)) > 0.02*float64(want) {
			t.Errorf("%s: %.0f major faults exported, its process took %d: more than 2%% apart", label, got[label], want)
		}
	}

	// The unit goes: its cgroup removed.
	unitDir := busy[rootRel+"/system.slice/db-test.service"]
	if err := os.Remove(unitDir); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the removed unit's series to go", func() bool {
		time.Sleep(500 * time.Millisecond)
		_, scrape = get(t, d.url+"/metrics")
		return !strings.Contains(scrape, `unit="db-test.service"`)
	})
}

// removeTree removes a cgroup tree the test made, deepest first.
func removeTree(t *testing.T, dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range dirs {
		for os.Remove(p) != nil && ctx.Err() == nil {
			_ = os.WriteFile(filepath.Join(p, "cgroup.kill"), []byte("1"), 0)
			time.Sleep(50 * time.Millisecond)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("test cgroups left under %s", dir)
	}
}

// TestWorkloadsFoldedAtADepth: a pod's two containers, folded into the
// pod by --cgroup.depth, give one workload, labelled with the pod and no
// container, whose major faults are the sum of the containers' processes'
// (each process's own count, from wait4's rusage); once a container is
// removed, the pod's counter keeps its faults.
func TestWorkloadsFoldedAtADepth(t *testing.T) {
	testenv.RequirePrivileged(t)
	parent, err := cgroup.OwnUnified("/proc")
	if err != nil {
		t.Fatalf("no cgroup2 group of this process to make test groups under: %v", err)
	}
	root, err := parent.CreatePressureGroup(fmt.Sprintf("test-depth-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(t, root.Path) })
	const uid = "5a0c2d3e-1b2c-4d5e-8f90-a1b2c3d4e5f6"
	podRel := filepath.Join(unifiedRel(t, root.Path), "kubepods/besteffort/pod"+uid)
	depth := strings.Count(strings.Trim(podRel, "/"), "/") + 1
	d := startDaemon(t, t.TempDir(), "--probes=bpf", "--cgroup.top-k=5", fmt.Sprintf("--cgroup.depth=%d", depth))

	var want uint64
	var containers []string
	for i := range 2 {
		dir := filepath.Join(root.Path, "kubepods/besteffort/pod"+uid, strings.Repeat(fmt.Sprintf("%02x", i+1), 32))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		containers = append(containers, dir)
		c := startInCgroup(t, dir, "0,1024", testenv.UncachedFile(t, 8<<20))
		if err := c.Wait(); err != nil {
			t.Fatalf("fault child in %s: %v", dir, err)
		}
		ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok || ru.Majflt < 1000 {
			t.Fatalf("fault child in %s: rusage %+v: fewer than the 1,000 major faults it was to take", dir, c.ProcessState.SysUsage())
		}
		want += uint64(ru.Majflt)
	}

	var labels string
	got, prev := 0.0, -1.0
	waitFor(t, 30*time.Second, "the pod's workload, its faults the same in two scrapes", func() bool {
		time.Sleep(500 * time.Millisecond)
		_, scrape := get(t, d.url+"/metrics")
		series := cgroupSeries(scrape, "thrashscope_cgroup_major_faults_total")
		labels, got = series[podRel], cgroupSum(scrape, "thrashscope_cgroup_major_faults_total", podRel)
		for c := range series {
			if strings.HasPrefix(c, podRel+"/") {
				t.Fatalf("a container's own series %q, with --cgroup.depth=%d", c, depth)
			}
		}
		steady := labels != "" && got == prev
		prev = got
		return steady
	})
	if !strings.Contains(labels, `pod_uid="`+uid+`"`) || strings.Contains(labels, `container_id=`) || !strings.Contains(labels, `qos="besteffort"`) {
		t.Errorf("the pod's labels {%s}: want its pod_uid, qos besteffort and no container_id", labels)
	}
	testenv.Figure(t, "folded pod faults", "%.0f, the containers' processes' majflt %d (%+.1f%%)", got, want, 100*(got-float64(want))/float64(want))
	if math.Abs(got-float64(want)) > 0.02*float64(want) {
		t.Errorf("the pod's major faults %.0f, its containers' processes' %d: more than 2%% apart", got, want)
	}

	var st unix.Stat_t
	if err := unix.Stat(containers[0], &st); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(containers[0]); err != nil {
		t.Fatal(err)
	}
	// The observer checks for removed cgroups every tenth sample; its log
	// says when it took this one out of the pod.
	id := fmt.Sprintf(" id=%d ", st.Ino)
	waitFor(t, 30*time.Second, "the observer to see the container's cgroup removed", func() bool {
		time.Sleep(200 * time.Millisecond)
		b, _ := os.ReadFile(d.log.Name())
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, `msg="a cgroup was removed;`) && strings.Contains(line, id) {
				return true
			}
		}
		return false
	})
	for range 3 { // and in every scrape after
		_, scrape := get(t, d.url+"/metrics")
		if after := cgroupSum(scrape, "thrashscope_cgroup_major_faults_total", podRel); after < got {
			t.Errorf("the pod's major faults went from %.0f to %.0f when a container was removed", got, after)
		}
		time.Sleep(600 * time.Millisecond)
	}
}

// cgroupSum is the sum of a metric's series for one cgroup in a scrape.
func cgroupSum(scrape, metric, cgroupLabel string) float64 {
	var sum float64
	for line := range strings.Lines(scrape) {
		rest, ok := strings.CutPrefix(line, metric+"{")
		if !ok || !strings.Contains(rest, `cgroup="`+cgroupLabel+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[strings.LastIndex(rest, "}")+1:]), 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// unifiedRel is a cgroup2 directory's path from the hierarchy's root, as
// the workloads' cgroup label has it.
func unifiedRel(t *testing.T, dir string) string {
	t.Helper()
	h, err := cgroup.UnifiedHierarchy("/proc")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(h.Point, dir)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(h.Root, rel)
}
