package observer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// running is an observer serving on a loopback port for one test.
type running struct {
	url  string
	done chan error
	stop context.CancelFunc
}

func start(t *testing.T, probes string) *running {
	t.Helper()
	cfg := validConfig()
	cfg.ListenAddresses = []string{"127.0.0.1:0"}
	cfg.Probes = probes
	cfg.SampleInterval = 200 * time.Millisecond
	o, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := Listen(cfg.ListenAddresses)
	if err != nil {
		o.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{url: "http://" + ls[0].Addr().String(), done: make(chan error, 1), stop: cancel}
	go func() { r.done <- o.Run(ctx, ls, "") }()
	t.Cleanup(func() { r.shutdown(t) })

	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(r.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("observer not ready after 10 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *running) shutdown(t *testing.T) {
	if r.stop == nil {
		return
	}
	r.stop()
	r.stop = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("observer stopped with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("observer did not stop within 10 s")
	}
}

func (r *running) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(r.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(path, "/metrics") {
		testenv.NoDuplicateSeries(t, string(b))
	}
	return resp.StatusCode, string(b)
}

// promtoolCheck runs promtool check metrics on a scrape; it prints nothing
// when the exposition follows the naming conventions.
func promtoolCheck(t *testing.T, scrape string) {
	t.Helper()
	promtool := testenv.RequireTool(t, "promtool", "prometheus")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// attachedPrograms counts loaded BPF programs with thrashscope's names.
func attachedPrograms(t *testing.T) int {
	t.Helper()
	n := 0
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return n
		} else if err != nil {
			t.Fatal(err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded meanwhile
		}
		info, err := p.Info()
		p.Close()
		if err == nil && (info.Name == "major_fault" || info.Name == "memory_stall" || info.Name == "process_exit") {
			n++
		}
	}
}

// takeFileFaults makes this very process take n file-backed major faults.
func takeFileFaults(t *testing.T, n int) {
	t.Helper()
	f, err := os.Open(testenv.UncachedFile(t, n*os.Getpagesize()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, n*os.Getpagesize(), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	var sum byte
	for i := 0; i < len(mem); i += os.Getpagesize() {
		sum += mem[i]
	}
	sink = sum
}

var sink byte

// selfMajFlt is this process's maj_flt, /proc/self/stat's count.
func selfMajFlt(t *testing.T) uint64 {
	t.Helper()
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	p, err := fs.ProcessStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return p.MajorFaults
}

func TestObserverWithBPF(t *testing.T) {
	testenv.RequirePrivileged(t)
	// The kernel frees an exited observer's programs a little after it
	// exits (the test before may have just stopped one): wait for them to
	// go, so that they are not counted as this observer's.
	before := attachedPrograms(t)
	for deadline := time.Now().Add(5 * time.Second); before > 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		before = attachedPrograms(t)
	}
	// The kernel's own count of this process's major faults (the observer
	// runs in it too): every fault the probes count after they attach is
	// one of those since before the start, and every fault taken below is
	// one they must count.
	majBeforeStart := selfMajFlt(t)
	r := start(t, ProbesBPF)
	if got := attachedPrograms(t); got < before+3 {
		t.Fatalf("%d thrashscope BPF programs loaded while running, want %d more than before", got, 3)
	}
	maj0 := selfMajFlt(t)
	takeFileFaults(t, 2000)
	taken := selfMajFlt(t) - maj0
	if taken < 1800 {
		t.Fatalf("the kernel counted %d major faults over 2,000 uncached pages read: the file was cached, the test proves nothing", taken)
	}

	// The faults reach /metrics with the next samples: poll for them.
	self := fmt.Sprintf(`thrashscope_process_major_faults_total{comm=%q,kind="file",pid="%d"}`, "observer.test", os.Getpid())
	var body, line string
	var n float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var code int
		code, body = r.get(t, "/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		line = ""
		for l := range strings.SplitSeq(body, "\n") {
			if strings.HasPrefix(l, self) {
				line = l
			}
		}
		_, err := fmt.Sscanf(strings.TrimPrefix(line, self), " %g", &n)
		if (err == nil && n >= float64(taken)) || time.Now().After(deadline) {
			break
		}
	}
	since := selfMajFlt(t) - majBeforeStart
	for _, probe := range []string{"major_faults", "memory_stall", "fault_latency", "process_exit"} {
		// This kernel has what the fast way needs.
		if want := fmt.Sprintf("thrashscope_probe_up{probe=%q,way=\"fast\"} 1", probe); !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if n < float64(taken) || n > float64(since) {
		t.Errorf("this process's file major faults after 10 s: %q; want from the %d the kernel counted over the 2,000 pages read to the %d it counted since before the observer started", line, taken, since)
	}
	t.Logf("scraped %.0f file major faults of this process; the kernel's maj_flt: %d over the reads of 2,000 pages, %d since before the start", n, taken, since)
	if !strings.Contains(body, `thrashscope_major_fault_latency_seconds_count{kind="file"}`) {
		t.Error("scrape lacks the major-fault latency histogram")
	}
	promtoolCheck(t, body)

	r.shutdown(t)
	// The kernel frees a program in deferred work after its last reference
	// goes, so give it a moment before calling it a leak.
	got := 0
	for range 50 {
		if got = attachedPrograms(t); got == before {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%d thrashscope BPF programs still loaded 5 s after shutdown, want %d", got, before)
}

func TestObserverOnProcfsAlone(t *testing.T) {
	r := start(t, ProbesProcfs)
	code, body := r.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`thrashscope_probe_up{probe="major_faults",way=""} 0`,
		"thrashscope_swap_in_pages_total ",
		`thrashscope_cpu_seconds_total{mode="user"}`,
		"thrashscope_build_info{",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(body, "thrashscope_major_fault_latency_seconds") {
		t.Error("latency histogram exported without the BPF probe")
	}
	promtoolCheck(t, body)
	if code, body := r.get(t, "/healthz"); code != http.StatusOK || !strings.Contains(body, "ok") {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := r.get(t, "/nope"); code != http.StatusNotFound || !strings.Contains(body, `"error"`) {
		t.Errorf("/nope: %d %s, want a JSON 404", code, body)
	}
}

func TestCheckPrintsProbeTable(t *testing.T) {
	testenv.RequirePrivileged(t)
	var out bytes.Buffer
	if err := Check(validConfig(), &out, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatalf("Check: %v\n%s", err, out.String())
	}
	status := map[string]string{}
	for line := range strings.Lines(out.String()) {
		if f := strings.Fields(line); len(f) >= 2 {
			status[f[0]] = f[1]
		}
	}
	if status["PROBE"] != "STATUS" {
		t.Errorf("check table has no header:\n%s", out.String())
	}
	for _, name := range readout.Names {
		if status[name] != "up" {
			t.Errorf("check table says %s is %q, want up:\n%s", name, status[name], out.String())
		}
	}
}
