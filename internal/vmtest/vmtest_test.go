package vmtest

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// readCPIO reads a newc archive back: each entry's name, mode and data.
func readCPIO(t *testing.T, b []byte) map[string]Entry {
	t.Helper()
	out := map[string]Entry{}
	for off := 0; ; {
		if len(b)-off < 110 || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int(v)
		}
		mode, size, nameSize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+nameSize-1])
		off = (off + 110 + nameSize + 3) &^ 3
		if name == "TRAILER!!!" {
			return out
		}
		var fm fs.FileMode
		switch mode & 0o170000 {
		case 0o040000:
			fm = fs.ModeDir
		case 0o120000:
			fm = fs.ModeSymlink
		}
		out[name] = Entry{Name: name, Mode: fm | fs.FileMode(mode&0o777), Data: b[off : off+size]}
		off = (off + size + 3) &^ 3
	}
}

// The archive holds each entry whole, with the directories on the way to
// it made once and first.
func TestWriteCPIO(t *testing.T) {
	var buf bytes.Buffer
	big := bytes.Repeat([]byte("x"), 10001)
	err := writeCPIO(&buf, []Entry{
		{Name: "proc", Mode: fs.ModeDir | 0o755},
		{Name: "thrashscope/bin/observer", Mode: 0o755, Size: int64(len(big)), Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(big)), nil }},
		{Name: "thrashscope/plan.json", Mode: 0o644, Data: []byte(`{}`)},
		{Name: "thrashscope", Mode: fs.ModeDir | 0o755},
		{Name: "bin/sh", Mode: fs.ModeSymlink, Data: []byte("busybox")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("%d bytes: not padded to 4", buf.Len())
	}
	got := readCPIO(t, buf.Bytes())
	want := map[string]fs.FileMode{
		"proc": fs.ModeDir | 0o755, "thrashscope": fs.ModeDir | 0o755, "thrashscope/bin": fs.ModeDir | 0o755,
		"thrashscope/bin/observer": 0o755, "thrashscope/plan.json": 0o644, "bin": fs.ModeDir | 0o755, "bin/sh": fs.ModeSymlink | 0o777,
	}
	if len(got) != len(want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	for name, mode := range want {
		if e, ok := got[name]; !ok || e.Mode != mode {
			t.Errorf("%s: %v (%v), want %v", name, e.Mode, ok, mode)
		}
	}
	if !bytes.Equal(got["thrashscope/bin/observer"].Data, big) || string(got["bin/sh"].Data) != "busybox" {
		t.Error("an entry's data did not read back")
	}
	if err := writeCPIO(io.Discard, []Entry{{Name: "short", Mode: 0o644, Size: 5, Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("abc")), nil }}}); err == nil {
		t.Error("a file shorter than its size was written")
	}
}

func TestModuleOrder(t *testing.T) {
	dep := `kernel/drivers/block/virtio_blk.ko.xz: kernel/drivers/virtio/virtio.ko.xz kernel/drivers/virtio/virtio_ring.ko.xz
kernel/drivers/virtio/virtio_ring.ko.xz:
kernel/drivers/virtio/virtio.ko.xz: kernel/drivers/virtio/virtio_ring.ko.xz
kernel/fs/ext4/ext4.ko.xz: kernel/lib/crc16.ko.xz kernel/fs/mbcache.ko.xz
kernel/lib/crc16.ko.xz:
kernel/fs/mbcache.ko.xz:
`
	builtin := "kernel/drivers/virtio/virtio_pci.ko\n"
	got, err := ModuleOrder(dep, builtin, []string{"virtio-pci", "virtio_blk", "ext4", "virtio"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kernel/drivers/virtio/virtio_ring.ko.xz", "kernel/drivers/virtio/virtio.ko.xz", "kernel/drivers/block/virtio_blk.ko.xz",
		"kernel/lib/crc16.ko.xz", "kernel/fs/mbcache.ko.xz", "kernel/fs/ext4/ext4.ko.xz"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("order %v\nwant %v", got, want)
	}
	if _, err := ModuleOrder(dep, builtin, []string{"nvme"}); err == nil || !strings.Contains(err.Error(), "no module nvme") {
		t.Errorf("a module the kernel lacks: %v", err)
	}
}

func TestReportsAndTests(t *testing.T) {
	out := "=== RUN   TestA\n    a_test.go:1: fine\n--- PASS: TestA (1.25s)\n=== RUN   TestB\n    x_test.go:3: no\n" +
		"=== RUN   TestB/sub\n    x_test.go:4: one\n    x_test.go:5: two\n    x_test.go:6: three\n" +
		"=== RUN   TestB/later\n    x_test.go:8: fine\n    x_test.go:9: fine too\n" +
		"--- FAIL: TestB (0.50s)\n    --- FAIL: TestB/sub (0.10s)\n    --- PASS: TestB/later (0.10s)\n--- SKIP: TestC (0.00s)\n" +
		"=== RUN   TestN\n    n_test.go:7: " + testenv.NotApplicableMark + "v1 only; TestA covers it here\n--- SKIP: TestN (0.00s)\n" +
		"=== RUN   TestS\n=== RUN   TestS/mglru\n    s_test.go:2: " + testenv.NotApplicableMark + "no MGLRU; its refusal covers it here\n" +
		"=== RUN   TestS/zram\n--- PASS: TestS (2.00s)\n    --- SKIP: TestS/mglru (0.00s)\n    --- PASS: TestS/zram (1.00s)\n"
	got := GoTests(out)
	want := []TestResult{{"TestA", "PASS", 1.25, "", nil}, {"TestB", "FAIL", 0.5, "sub: x_test.go:4: one / x_test.go:5: two / x_test.go:6: three", nil},
		{"TestC", "SKIP", 0, "", nil}, {"TestN", NotApplicable, 0, "v1 only; TestA covers it here", nil},
		{"TestS", "PASS", 2, "", []string{"mglru: no MGLRU; its refusal covers it here"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GoTests %v, want %v", got, want)
	}
	// A long why keeps its end, where the cause is.
	long := GoTests("=== RUN   TestL\n    l_test.go:1: " + strings.Repeat("x", 2*whyBytes) + "\n    l_test.go:2: the cause\n--- FAIL: TestL (1.00s)\n")
	if len(long) != 1 || !strings.HasSuffix(long[0].Why, "l_test.go:2: the cause") || !strings.HasPrefix(long[0].Why, "…") {
		t.Errorf("a long why: %+v", long)
	}
	// A plain skip passes nothing: it fails the kernel and is named. One
	// that does not apply is reported so.
	skipped := KernelResult{Kernel: Kernel{Name: "6.1"}, Reports: []Report{{Kind: "step", Step: "probes", Pass: true, Tests: want[2:]}}}
	if skipped.Pass() || !reflect.DeepEqual(Failures([]KernelResult{skipped}), []string{"6.1, probes: TestC skipped: a test that cannot run here fails, and one that does not apply says so (testenv.NotApplicable)"}) {
		t.Errorf("a plain skip: pass %v, failures %q", skipped.Pass(), Failures([]KernelResult{skipped}))
	}
	skipped.Reports[0].Tests = want[3:]
	if md := Markdown([]KernelResult{skipped}); !strings.Contains(md, "| probes: TestS | pass 2s; mglru not applicable |") {
		t.Errorf("a passing test whose subtest does not apply, in the table:\n%s", md)
	}
	if !skipped.Pass() || !strings.Contains(Markdown([]KernelResult{skipped}), "| probes: TestN | not applicable |") {
		t.Errorf("a test that does not apply: pass %v\n%s", skipped.Pass(), Markdown([]KernelResult{skipped}))
	}
	want = want[:2]
	console := "[    1.0] boot\r\n" + Report{Kind: "boot", Uname: "6.1.0"}.Line() + "\r\n" +
		"  | probes: " + Report{Kind: "done"}.Line() + "\n" + // a step's output is not a report
		Report{Kind: "step", Step: "probes", Pass: true, Tests: want}.Line() + "\n" + Report{Kind: "done", Pass: true}.Line() + "\n"
	reps := ParseReports(strings.NewReader(console))
	if len(reps) != 3 || reps[0].Uname != "6.1.0" || reps[1].Step != "probes" || len(reps[1].Tests) != 2 || reps[2].Kind != "done" {
		t.Errorf("reports %+v", reps)
	}
	res := KernelResult{Kernel: Kernel{Name: "6.1"}, Reports: reps}
	if !res.Pass() {
		t.Error("a kernel whose steps passed did not pass")
	}
	res.Reports[1].Pass = false
	if res.Pass() || !strings.Contains(Table([]KernelResult{res}), "probes: TestB") {
		t.Errorf("a failed step: pass %v\n%s", res.Pass(), Table([]KernelResult{res}))
	}
	crashed := Report{Kind: "step", Step: "runs", Seconds: 1800, Output: "=== RUN   TestD\npanic: test timed out after 30m0s\n\trunning tests:\n\t\tTestD (29m59s)\n\n(killed after its 1800 s)\n"}
	res.Reports = append(res.Reports, crashed)
	other := KernelResult{Kernel: Kernel{Name: "6.12"}, Err: "fetching linux-image-6.12-amd64: 404"}
	got2 := Failures([]KernelResult{res, other})
	want2 := []string{
		"6.1, probes: TestB failed after 0s: sub: x_test.go:4: one / x_test.go:5: two / x_test.go:6: three",
		"6.1, runs: failed after 1800s: running tests: / TestD (29m59s) / (killed after its 1800 s)",
		"6.12: fetching linux-image-6.12-amd64: 404",
	}
	if !reflect.DeepEqual(got2, want2) {
		t.Errorf("Failures:\n%q\nwant\n%q", got2, want2)
	}
}

func TestFigures(t *testing.T) {
	out := "=== RUN   TestA\n    a_test.go:9: thrashscope-figure faults anon: +0.4% of maj_flt (812)\n" +
		"    a_test.go:9: a plain log line: thrashscope-figure\n" +
		"    a_test.go:9: thrashscope-figure stall one: -30% of PSI some (1s)\n" +
		"    a_test.go:9: thrashscope-figure stall one: +3% of PSI some (1.2s)\n--- PASS: TestA (1.25s)\n"
	got := Figures(out)
	want := []Figure{{"faults anon", "+0.4% of maj_flt (812)"}, {"stall one", "+3% of PSI some (1.2s)"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Figures %v, want %v (a retried test's last value kept)", got, want)
	}
	a := KernelResult{Kernel: Kernel{Name: "6.1"}, Reports: []Report{{Kind: "step", Step: "probes", Pass: true, Figures: want}}}
	b := KernelResult{Kernel: Kernel{Name: "5.10"}, Reports: []Report{{Kind: "step", Step: "runs", Pass: true, Figures: []Figure{{"small run", "6 | 6"}}}}}
	md := Markdown([]KernelResult{a, b})
	for _, line := range []string{"| faults anon | +0.4% of maj_flt (812) | – |", "| small run | – | 6 \\| 6 |"} {
		if !strings.Contains(md, line) {
			t.Errorf("Markdown lacks %q:\n%s", line, md)
		}
	}
	if !strings.Contains(Table([]KernelResult{a, b}), "MEASURED") {
		t.Errorf("Table lacks the measured figures:\n%s", Table([]KernelResult{a, b}))
	}
}

func TestSplice(t *testing.T) {
	page := "# Kernels\nintro\n" + MarkdownBegin + "\nold table\n" + MarkdownEnd + "\nafter\n"
	want := "# Kernels\nintro\n" + MarkdownBegin + "\n| new |\n" + MarkdownEnd + "\nafter\n"
	if got, ok := Splice(page, MarkdownBegin, MarkdownEnd, "| new |\n"); !ok || got != want {
		t.Errorf("Splice:\n%s\nwant\n%s", got, want)
	}
	if got, ok := Splice(page, SummaryBegin, SummaryEnd, "| new |\n"); ok || got != page {
		t.Errorf("a page without the markers: %q, %v", got, ok)
	}
}

func TestSummary(t *testing.T) {
	res := KernelResult{Kernel: Kernel{Name: "6.1"}, Image: Image{Release: "6.1.0-56-amd64"}, Reports: []Report{
		{Kind: "step", Step: "probes", Pass: true, Figures: []Figure{{"faults anon", "+0.4% of maj_flt (812)"}, {"faults file", "-1.5% of maj_flt (9)"}, {"stall one", "+3% of PSI some (1s)"}}},
		{Kind: "step", Step: "runs", Pass: false, Tests: []TestResult{{Name: "A", Result: "PASS", Seconds: 1}, {Name: "B", Result: "FAIL", Seconds: 1}}},
	}}
	got := Summary([]KernelResult{res})
	want := "| 6.1 (6.1.0-56-amd64) | – | -1.5% … +0.4% (2) | +3% … +3% (1) | not run | FAIL (1/2) | not run |"
	if !strings.Contains(got, want) {
		t.Errorf("Summary:\n%s\nwant the line\n%s", got, want)
	}
}

// observer --check's table, with its way column, read back.
func TestProbesFromTheCheckTable(t *testing.T) {
	out := `BPF programs: the portable way, this kernel lacks bpf_find_vma (Linux 5.17+).
PROBE               STATUS   REQUIRED  WAY      SINCE  DETAIL
major_faults        up       true      portable 5.8+   perf_event/PAGE_FAULTS_MAJ on 2 CPUs, raw_tp/mm_filemap_fault
memory_stall        FAILED   true      portable 5.8+   program memory_stall did not load
fault_latency       up       false     portable 5.8+   raw_tp/page_fault_user, raw_tp/page_fault_kernel while major faults occur
`
	res := KernelResult{Reports: []Report{{Kind: "step", Step: CheckStep, Output: out}}}
	got := res.Probes()
	want := []Probe{
		{Name: "major_faults", Status: "up", Way: "portable", Since: "5.8+", Detail: "perf_event/PAGE_FAULTS_MAJ on 2 CPUs, raw_tp/mm_filemap_fault", Required: true},
		{Name: "memory_stall", Status: "FAILED", Way: "portable", Since: "5.8+", Detail: "program memory_stall did not load", Required: true},
		{Name: "fault_latency", Status: "up", Way: "portable", Since: "5.8+", Detail: "raw_tp/page_fault_user, raw_tp/page_fault_kernel while major faults occur"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Probes() =\n%+v\nwant\n%+v", got, want)
	}
	if up := res.ProbesUp(); up != "2/3 (portable)" {
		t.Errorf("ProbesUp() = %q", up)
	}
}

// The reports come from the report port, whole, where the console's copy
// has a kernel message in the middle of a line; from the console when the
// port carried none.
func TestReadReports(t *testing.T) {
	step := Report{Kind: "step", Step: "cgroups", Pass: true}.Line()
	done := Report{Kind: "done", Pass: true}.Line()
	cut := len(step) / 2
	console := step[:cut] + "\n[  421.9] Memory cgroup out of memory: Killed process 504 (cgroup.test)\n" + step[cut:] + "\n" + done + "\n"
	if got := ParseReports(strings.NewReader(console)); len(got) != 1 {
		t.Fatalf("the console's copy: %d reports read, want only the done one (the step's line is cut)", len(got))
	}
	port := filepath.Join(t.TempDir(), "reports.txt")
	if err := os.WriteFile(port, []byte(step+"\n"+done+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := readReports(console, port); len(got) != 2 || got[0].Step != "cgroups" || got[1].Kind != "done" {
		t.Errorf("from the port: %+v, want the step and done", got)
	}
	empty := filepath.Join(t.TempDir(), "none.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := readReports(done+"\n", empty); len(got) != 1 || got[0].Kind != "done" {
		t.Errorf("no port output: %+v, want the console's done", got)
	}
}
