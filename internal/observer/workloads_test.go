package observer

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/labelvalue"
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
	// The observer is given the test's group as its cgroup2 mount, as a
	// container is given the host's: the groups made in it are at the top
	// of the hierarchy it names, where systemd and the kubelet put theirs
	// (workload.Trust believes their shapes there only).
	rootRel := ""
	busy := map[string]string{ // cgroup label -> dir
		rootRel + "/system.slice/db-test.service":             mk("system.slice/db-test.service"),
		rootRel + "/kubepods/burstable/pod" + uid + "/" + cid: mk("kubepods/burstable/pod" + uid + "/" + cid),
		// as the exposition format writes it: U+FFFD and its hex for the bad byte (labelvalue), the quote escaped
		rootRel + `/hostile/bad�FF\"q name`: mk("hostile/" + hostile),
	}
	d := startDaemon(t, t.TempDir(), "--probes=bpf", "--cgroup.top-k=5", "--path.cgroupfs="+root.Path)

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
	d := startDaemon(t, t.TempDir(), "--probes=bpf", "--cgroup.top-k=5", fmt.Sprintf("--cgroup.depth=%d", depth), "--cgroup.kubelet-root="+unifiedRel(t, root.Path))

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
		if !ok || ru.Majflt < minChildFaults {
			t.Fatalf("fault child in %s: rusage %+v: fewer than %d of the 1,024 major faults it was to take", dir, c.ProcessState.SysUsage(), minChildFaults)
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

// minChildFaults is how many of its 1,024 pages a fault child must fault
// in for its workload to be worth counting: the counts are checked
// against its own rusage, so a few pages the drop left cached (998 of
// 1,024, once, on 6.1 under TCG) change nothing but the floor.
const minChildFaults = 900

// TestHostileNamesGiveDistinctSeries: real cgroups whose names differ only
// in a control byte or a byte of invalid UTF-8, and two long siblings whose
// paths pass the label bound, each with a process that faults: one
// workload each, in text, OpenMetrics and protobuf scrapes alike, with no
// series twice, and each workload's count its own process's (wait4's
// rusage) within 2 %.
func TestHostileNamesGiveDistinctSeries(t *testing.T) {
	testenv.RequirePrivileged(t)
	parent, err := cgroup.OwnUnified("/proc")
	if err != nil {
		t.Fatalf("no cgroup2 group of this process to make test groups under: %v", err)
	}
	root, err := parent.CreatePressureGroup(fmt.Sprintf("test-hostile-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(t, root.Path) })
	long := strings.Repeat("L", 239)
	names := []string{"hostile-test-\x01", "hostile-test-\x02", "hostile-test-\xff", "hostile-test-\xfe", long + "1", long + "2"}
	d := startDaemon(t, t.TempDir(), "--probes=bpf", fmt.Sprintf("--cgroup.top-k=%d", len(names)+4))
	want := map[string]int64{} // the cgroup label, escaped, to its process's faults
	for _, name := range names {
		dir := filepath.Join(root.Path, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		c := startInCgroup(t, dir, "0,1024", testenv.UncachedFile(t, 4<<20)) // a file of its own, uncached
		if err := c.Wait(); err != nil {
			t.Fatalf("fault child in %q: %v", dir, err)
		}
		ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok || ru.Majflt < minChildFaults {
			t.Fatalf("fault child in %q: rusage %+v: fewer than %d of the 1,024 major faults it was to take", dir, c.ProcessState.SysUsage(), minChildFaults)
		}
		want[labelvalue.Escape(unifiedRel(t, dir))] = ru.Majflt
	}
	if len(want) != len(names) {
		t.Fatalf("%d names gave %d labels", len(names), len(want))
	}

	got := map[string]float64{}
	prev := map[string]float64{}
	waitFor(t, 30*time.Second, "each hostile workload's faults, the same in two scrapes", func() bool {
		time.Sleep(500 * time.Millisecond)
		_, scrape := get(t, d.url+"/metrics")
		steady := true
		for label := range want {
			got[label] = cgroupSum(scrape, "thrashscope_cgroup_major_faults_total", label)
			steady = steady && got[label] > 0 && got[label] == prev[label]
		}
		maps.Copy(prev, got)
		return steady
	})
	for label, n := range want {
		if math.Abs(got[label]-float64(n)) > 0.02*float64(n) {
			t.Errorf("%q: %.0f major faults exported, its process took %d: more than 2%% apart", label, got[label], n)
		}
	}

	// No series twice, whatever the format a scraper asks for.
	for _, accept := range []string{"text/plain;version=0.0.4", "application/openmetrics-text;version=1.0.0", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"} {
		req, err := http.NewRequest("GET", d.url+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("a scrape asking for %s: %d, %v", accept, resp.StatusCode, err)
		}
		if expfmt.ResponseFormat(resp.Header).FormatType() != expfmt.TypeProtoDelim {
			// Text and OpenMetrics: one sample a line.
			testenv.NoDuplicateSeries(t, string(body))
			for label := range want {
				if cgroupSum(string(body), "thrashscope_cgroup_major_faults_total", label) <= 0 {
					t.Errorf("asking for %s: no thrashscope_cgroup_major_faults_total series of %q", accept, label)
				}
			}
			continue
		}
		labels := map[string]bool{}
		seen := map[string]bool{}
		for _, s := range protoSeries(t, body) {
			if s.name == "thrashscope_cgroup_major_faults_total" {
				labels[s.labels["cgroup"]] = true
			}
			if k := s.key(); seen[k] {
				t.Errorf("asking for %s: the series %s more than once", accept, k)
			}
			seen[s.key()] = true
		}
		for label := range want {
			if !labels[label] {
				t.Errorf("asking for %s: no thrashscope_cgroup_major_faults_total series of %q", accept, label)
			}
		}
	}
}

// aSeries is one series of a scrape: its name and labels.
type aSeries struct {
	name   string
	labels map[string]string
}

func (s aSeries) key() string {
	var b strings.Builder
	b.WriteString(s.name)
	for _, k := range slices.Sorted(maps.Keys(s.labels)) {
		fmt.Fprintf(&b, ",%s=%q", k, s.labels[k])
	}
	return b.String()
}

// protoSeries decodes a delimited protobuf scrape, each series as often as
// it appears.
func protoSeries(t *testing.T, body []byte) []aSeries {
	t.Helper()
	var out []aSeries
	dec := expfmt.NewDecoder(bytes.NewReader(body), expfmt.NewFormat(expfmt.TypeProtoDelim))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("decoding a protobuf scrape: %v", err)
		}
		for _, m := range mf.GetMetric() {
			s := aSeries{name: mf.GetName(), labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			out = append(out, s)
		}
	}
}

// TestPodLabelsOnlyUnderTheKubeletRoot: the kubelet's shape (kubepods,
// QoS, pod, container) is a pod only right under the kubelet's root; the
// same shape under a user@UID.service delegation, which its user may
// build, or under any other group, is just names (the units' trust is
// TestParse's: it reads the path from the hierarchy's root, and the test's
// groups are under its own).
func TestPodLabelsOnlyUnderTheKubeletRoot(t *testing.T) {
	testenv.RequirePrivileged(t)
	parent, err := cgroup.OwnUnified("/proc")
	if err != nil {
		t.Fatalf("no cgroup2 group of this process to make test groups under: %v", err)
	}
	root, err := parent.CreatePressureGroup(fmt.Sprintf("test-spoof-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(t, root.Path) })
	const uid = "7b1d7a2b-54c8-4f0e-9b1a-0c2d3e4f5a6b"
	uidU := strings.ReplaceAll(uid, "-", "_")
	cid := strings.Repeat("7c", 32)
	shape := "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope"
	dirs := map[string]string{ // what the path is to the dir
		"under the kubelet's root": filepath.Join(root.Path, "kubelet", shape),
		"under a user delegation":  filepath.Join(root.Path, "user.slice/user-4242.slice/user@4242.service", shape),
		"under another group":      filepath.Join(root.Path, "hostile-test-spoof", shape),
	}
	d := startDaemon(t, t.TempDir(), "--probes=bpf", "--cgroup.top-k=10", "--cgroup.kubelet-root="+unifiedRel(t, filepath.Join(root.Path, "kubelet")))
	labels := map[string]string{} // the cgroup label to what it is
	for what, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		c := startInCgroup(t, dir, "0,1024", testenv.UncachedFile(t, 4<<20)) // a file of its own, uncached
		if err := c.Wait(); err != nil {
			t.Fatalf("fault child %s: %v", what, err)
		}
		labels[labelvalue.Escape(unifiedRel(t, dir))] = what // clipped: the paths pass 256 bytes
	}
	var series map[string]string
	waitFor(t, 30*time.Second, "the three workloads in a scrape", func() bool {
		time.Sleep(500 * time.Millisecond)
		_, scrape := get(t, d.url+"/metrics")
		series = cgroupSeries(scrape, "thrashscope_cgroup_major_faults_total")
		for label := range labels {
			if _, ok := series[label]; !ok {
				return false
			}
		}
		return true
	})
	for label, what := range labels {
		got := series[label]
		pod := strings.Contains(got, `pod_uid="`+uid+`"`) && strings.Contains(got, `container_id="`+cid+`"`) && strings.Contains(got, `qos="burstable"`)
		forged := strings.Contains(got, "pod_uid=") || strings.Contains(got, "container_id=") || strings.Contains(got, "qos=")
		switch what {
		case "under the kubelet's root":
			if !pod {
				t.Errorf("%s: labels {%s}, want its pod_uid, container_id and qos", what, got)
			}
		default:
			if forged {
				t.Errorf("%s: labels {%s}, want no pod labels", what, got)
			}
		}
	}
}

// TestV1ReadingsAreTheWorkloadsOwn: where memory is on cgroup v1, a
// workload's memory readings come from the v1 group at its own path, and
// from nowhere else. A process joins its cgroup2 group, faults for two
// seconds in the v1 group it started in (this test's own), then joins the
// v1 group at its workload's path: across 20 scrapes a second apart no
// memory counter of the workload goes down, and once the process is gone
// each equals what the v1 group's own files say.
func TestV1ReadingsAreTheWorkloadsOwn(t *testing.T) {
	testenv.RequirePrivileged(t)
	v1, ok := cgroup.V1MemoryMount("/proc")
	if !ok {
		testenv.NotApplicable(t, "memory is on cgroup v2 here: a workload's readings are its cgroup2 group's own files", "TestReadKernelAgreesWithTheProcess")
	}
	parent, err := cgroup.OwnUnified("/proc")
	if err != nil {
		t.Fatalf("no cgroup2 group of this process to make test groups under: %v", err)
	}
	u, err := parent.CreatePressureGroup(fmt.Sprintf("test-v1own-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	rel := unifiedRel(t, u.Path)
	own := filepath.Join(v1, rel) // the v1 group at the workload's path
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	var child *exec.Cmd
	t.Cleanup(func() {
		if child != nil {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
		removeTree(t, u.Path)
		if err := os.Remove(own); err != nil {
			t.Errorf("the test's v1 group %s: %v", own, err)
		}
	})
	d := startDaemon(t, t.TempDir(), "--probes=bpf", "--cgroup.top-k=5")
	child = startInCgroup(t, u.Path, "0,0", testenv.UncachedFile(t, 8<<20))
	waitFor(t, 30*time.Second, "the workload in a scrape", func() bool {
		time.Sleep(300 * time.Millisecond)
		_, scrape := get(t, d.url+"/metrics")
		return len(memoryCounters(scrape, rel)) > 0
	})
	time.Sleep(2 * time.Second) // faulting in the v1 group it started in
	if err := os.WriteFile(filepath.Join(own, "cgroup.procs"), []byte(strconv.Itoa(child.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	last := map[string]float64{}
	for i := range 20 {
		_, scrape := get(t, d.url+"/metrics")
		for k, v := range memoryCounters(scrape, rel) {
			if v < last[k] {
				t.Errorf("scrape %d: %s went from %.0f to %.0f", i, k, last[k], v)
			}
			last[k] = v
		}
		time.Sleep(time.Second)
	}
	if last[`thrashscope_cgroup_memory_stat_major_faults_total{cgroup="`+rel+`"}`] < 100 {
		t.Fatalf("the workload's memory.stat major faults %v: the child did not fault in its own v1 group, the test proves nothing", last)
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	child = nil

	// Once the process is gone the files hold still: the series are them.
	stat := func() map[string]float64 {
		b, err := os.ReadFile(filepath.Join(own, "memory.stat"))
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]float64{}
		for line := range strings.Lines(string(b)) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
			m[k], _ = strconv.ParseFloat(v, 64)
		}
		return m
	}
	want := func() map[string]float64 {
		s := stat()
		failcnt, err := os.ReadFile(filepath.Join(own, "memory.failcnt"))
		if err != nil {
			t.Fatal(err)
		}
		max, _ := strconv.ParseFloat(strings.TrimSpace(string(failcnt)), 64)
		return map[string]float64{
			`thrashscope_cgroup_memory_stat_major_faults_total{cgroup="` + rel + `"}`:        s["total_pgmajfault"],
			`thrashscope_cgroup_workingset_refaults_total{cgroup="` + rel + `",type="anon"}`: s["total_workingset_refault_anon"],
			`thrashscope_cgroup_workingset_refaults_total{cgroup="` + rel + `",type="file"}`: s["total_workingset_refault_file"],
			`thrashscope_cgroup_memory_events_total{cgroup="` + rel + `",event="max"}`:       max,
		}
	}
	var got, kernel map[string]float64
	agree := func() bool {
		for k, v := range kernel {
			if got[k] != v {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		_, scrape := get(t, d.url+"/metrics")
		got, kernel = memoryCounters(scrape, rel), want()
		if agree() || time.Now().After(deadline) {
			break
		}
	}
	for k, v := range kernel {
		if got[k] != v {
			t.Errorf("%s: exported %.0f, its own v1 group's file says %.0f", k, got[k], v)
		}
	}
}

// TestRunConsumersCountersNeverGoBack: a run's consumers join their
// cgroup2 group and their memory group at their start; scraped every second
// from the run's start until every consumer has joined and a few seconds
// on, no workload's memory counter goes down (on a hybrid host a
// consumer's figures came from its parent's v1 group for the two seconds
// it was in its cgroup2 group alone: 47,038 major faults, then 0). The
// watch comes from the run's own schedule: e4 at 0.1 meets its limit only
// at its 11th consumer, 20 s in with the preset's 10 s lead-in, which a
// fixed 20 scrapes missed.
func TestRunConsumersCountersNeverGoBack(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	d := startDaemon(t, t.TempDir(), "--probes=bpf")
	rec := d.startRun(t, `{"preset":"e4","scale":0.1,"lead_in":"1s"}`)
	joined := rec.Spec.LeadIn.D() + time.Duration(rec.Spec.Consumers)*rec.Spec.Interval.D()
	last := map[string]float64{}
	seen, scrapes := 0, 0
	for end := time.Now().Add(joined + 5*time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		_, scrape := get(t, d.url+"/metrics")
		for k, v := range memoryCounters(scrape, "") {
			if v < last[k] {
				t.Errorf("scrape %d: %s went from %.0f to %.0f", scrapes, k, last[k], v)
			}
			last[k] = v
		}
		if n := len(cgroupSeries(scrape, "thrashscope_cgroup_major_faults_total")); n > seen {
			seen = n
		}
		scrapes++
	}
	if seen == 0 {
		t.Fatalf("run %s: no workload in %d scrapes over %s, every consumer joined, the test proves nothing", rec.ID, scrapes, joined+5*time.Second)
	}
	t.Logf("run %s: %d memory counters followed over %d scrapes, up to %d workloads a scrape", rec.ID, len(last), scrapes, seen)
}

// memoryCounters are a workload's cgroup_memory_* and cgroup_workingset_*
// counters in a scrape, by series; every workload's for cgroupLabel "".
func memoryCounters(scrape, cgroupLabel string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.Lines(scrape) {
		if !strings.HasPrefix(line, "thrashscope_cgroup_memory_") && !strings.HasPrefix(line, "thrashscope_cgroup_workingset_") {
			continue
		}
		i := strings.LastIndexByte(strings.TrimSpace(line), ' ')
		key := line[:i]
		name, _, _ := strings.Cut(key, "{")
		if !strings.HasSuffix(name, "_total") || (cgroupLabel != "" && !strings.Contains(key, `cgroup="`+cgroupLabel+`"`)) {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(line[i:]), 64); err == nil {
			out[key] = v
		}
	}
	return out
}
