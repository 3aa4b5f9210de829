package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// fakeProbe stands in for the BPF probe: the collectors are tested on fixed
// counters here; the real probe is tested against the kernel in internal/probe.
type fakeProbe struct{ snap readout.Snapshot }

func (f fakeProbe) Read() (readout.Snapshot, error) { return f.snap, nil }
func (f fakeProbe) Arm(time.Time, readout.Snapshot) {}
func (f fakeProbe) Status() []readout.Status {
	out := make([]readout.Status, 0, len(readout.Names))
	for _, n := range readout.Names {
		out = append(out, readout.Status{Name: n, Attached: n != readout.ProcessExit, Required: true, Way: "fast"})
	}
	return out
}

func collector(t *testing.T, root string, p sampler.ProbeReader) *Collector {
	t.Helper()
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	line := pipeline.New(pipeline.Config{Sampler: sampler.New(sampler.Config{ProcFS: fs, Probe: p, TopK: 5})})
	if err := line.Step(); err != nil {
		t.Fatal(err)
	}
	return NewCollector(line)
}

func TestSystemMetricsFromFixtures(t *testing.T) {
	c := collector(t, "../procfs/testdata/proc", nil)
	const want = `
# HELP thrashscope_paged_in_bytes_total Bytes of block I/O read in (vmstat pgpgin, KiB x 1024).
# TYPE thrashscope_paged_in_bytes_total counter
thrashscope_paged_in_bytes_total 4.194304e+06
# HELP thrashscope_paged_out_bytes_total Bytes of block I/O written out (vmstat pgpgout, KiB x 1024).
# TYPE thrashscope_paged_out_bytes_total counter
thrashscope_paged_out_bytes_total 8.388608e+06
# HELP thrashscope_swap_in_pages_total Pages swapped in (vmstat pswpin).
# TYPE thrashscope_swap_in_pages_total counter
thrashscope_swap_in_pages_total 1001
# HELP thrashscope_swap_out_pages_total Pages swapped out (vmstat pswpout).
# TYPE thrashscope_swap_out_pages_total counter
thrashscope_swap_out_pages_total 2002
# HELP thrashscope_pressure_memory_stalled_seconds_total Time some or all non-idle tasks were stalled on memory (PSI /proc/pressure/memory).
# TYPE thrashscope_pressure_memory_stalled_seconds_total counter
thrashscope_pressure_memory_stalled_seconds_total{kind="full"} 0.654321
thrashscope_pressure_memory_stalled_seconds_total{kind="some"} 1.234567
# HELP thrashscope_workingset_refaults_total Evicted pages faulted back in while still in the working set (vmstat workingset_refault_*).
# TYPE thrashscope_workingset_refaults_total counter
thrashscope_workingset_refaults_total{type="anon"} 11
thrashscope_workingset_refaults_total{type="file"} 12
# HELP thrashscope_memory_available_bytes Memory available to new work without swapping (MemAvailable).
# TYPE thrashscope_memory_available_bytes gauge
thrashscope_memory_available_bytes 8.589934592e+09
# HELP thrashscope_swap_free_bytes Swap space unused (SwapFree).
# TYPE thrashscope_swap_free_bytes gauge
thrashscope_swap_free_bytes 1.073741824e+09
# HELP thrashscope_oom_kills_total Processes killed by the OOM killer (vmstat oom_kill).
# TYPE thrashscope_oom_kills_total counter
thrashscope_oom_kills_total 3
# HELP thrashscope_cpu_seconds_total CPU time of all CPUs by mode, from /proc/stat (the paper's CPU figures).
# TYPE thrashscope_cpu_seconds_total counter
thrashscope_cpu_seconds_total{mode="idle"} 98765.43
thrashscope_cpu_seconds_total{mode="iowait"} 43.21
thrashscope_cpu_seconds_total{mode="irq"} 0
thrashscope_cpu_seconds_total{mode="nice"} 1
thrashscope_cpu_seconds_total{mode="softirq"} 7.89
thrashscope_cpu_seconds_total{mode="steal"} 0.42
thrashscope_cpu_seconds_total{mode="system"} 234.56
thrashscope_cpu_seconds_total{mode="user"} 1234.56
# HELP thrashscope_probe_up 1 when the BPF probe is loaded and attached, 0 when it failed or thrashscope runs on procfs alone; way is how its programs reach the kernel's data (fast: Linux 5.17+; portable: older kernels, or --probes.way=portable), empty on procfs alone.
# TYPE thrashscope_probe_up gauge
thrashscope_probe_up{probe="fault_latency",way=""} 0
thrashscope_probe_up{probe="major_faults",way=""} 0
thrashscope_probe_up{probe="memory_stall",way=""} 0
thrashscope_probe_up{probe="memory_stall_sample",way=""} 0
thrashscope_probe_up{probe="process_exit",way=""} 0
`
	names := []string{"thrashscope_paged_in_bytes_total", "thrashscope_paged_out_bytes_total", "thrashscope_swap_in_pages_total",
		"thrashscope_swap_out_pages_total", "thrashscope_pressure_memory_stalled_seconds_total", "thrashscope_workingset_refaults_total",
		"thrashscope_memory_available_bytes", "thrashscope_swap_free_bytes", "thrashscope_oom_kills_total", "thrashscope_cpu_seconds_total",
		"thrashscope_probe_up"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

func TestNoPSIKernelOmitsPressure(t *testing.T) {
	c := collector(t, "../procfs/testdata/proc-nopsi", nil)
	if n := testutil.CollectAndCount(c, "thrashscope_pressure_memory_stalled_seconds_total"); n != 0 {
		t.Errorf("%d pressure series on a kernel without PSI, want none", n)
	}
	if n := testutil.CollectAndCount(c, "thrashscope_swap_in_pages_total"); n != 1 {
		t.Errorf("%d swap-in series, want the other sources to carry on", n)
	}
}

func TestProcessAndProbeMetrics(t *testing.T) {
	var lat readout.Histogram
	lat.Slots[12] = 3 // [4.1, 8.2) µs
	lat.Slots[20] = 1 // [1.05, 2.1) ms
	lat.SumSeconds = 0.0015
	fp := fakeProbe{snap: readout.Snapshot{
		Processes: map[uint32]readout.ProcessCounters{
			4242: {MajorFaults: readout.FaultCounts{readout.Anon: 700, readout.Shmem: 30, readout.File: 25}, Stall: readout.StallTime{OffCPU: 500 * time.Millisecond, Reclaim: 1800 * time.Millisecond, Sampled: 200 * time.Millisecond}},
			9999: {MajorFaults: readout.FaultCounts{readout.Anon: 5}}, // exited before its procfs read
		},
		Latency: map[string]readout.Histogram{readout.KindAnon: lat},
		Lost:    map[string]uint64{readout.MajorFaults: 7},
		Programs: []readout.ProgramStats{
			{Name: "major_fault", Runs: 730, RunTime: 146 * time.Microsecond},
			{Name: "memory_stall"},
		},
	}}
	c := collector(t, "../procfs/testdata/proc", fp)
	const want = `
# HELP thrashscope_process_major_faults_total Major page faults by kind, from the BPF probe since it first saw the process: anon (private anonymous memory read back from swap), shmem (shared anonymous memory or tmpfs read back from swap), file (a page-cache miss on a real file); unknown when the kind could not be told (or on procfs alone).
# TYPE thrashscope_process_major_faults_total counter
thrashscope_process_major_faults_total{comm="loadgen",kind="anon",pid="4242"} 700
thrashscope_process_major_faults_total{comm="loadgen",kind="file",pid="4242"} 25
thrashscope_process_major_faults_total{comm="loadgen",kind="shmem",pid="4242"} 30
# HELP thrashscope_process_memory_stall_seconds_total Time the process's threads spent in a memory stall as PSI counts it (in_memstall set: reclaim, refault reads, throttling), on CPU and off, summed over threads, from the BPF probe. Off CPU and reclaim are timed exactly; the rest on CPU is sampled every 1 ms.
# TYPE thrashscope_process_memory_stall_seconds_total counter
thrashscope_process_memory_stall_seconds_total{comm="loadgen",pid="4242"} 2.5
# HELP thrashscope_process_memory_stall_off_cpu_seconds_total The part of process_memory_stall_seconds_total spent off CPU: waiting for a refault read, throttled, or runnable but preempted. The rest was on CPU, mostly reclaiming.
# TYPE thrashscope_process_memory_stall_off_cpu_seconds_total counter
thrashscope_process_memory_stall_off_cpu_seconds_total{comm="loadgen",pid="4242"} 0.5
# HELP thrashscope_process_minor_faults_total Minor page faults (minflt in /proc/<pid>/stat).
# TYPE thrashscope_process_minor_faults_total counter
thrashscope_process_minor_faults_total{comm="loadgen",pid="4242"} 5000
# HELP thrashscope_process_cpu_seconds_total CPU time of the process by mode (utime, stime).
# TYPE thrashscope_process_cpu_seconds_total counter
thrashscope_process_cpu_seconds_total{comm="loadgen",mode="system",pid="4242"} 0.75
thrashscope_process_cpu_seconds_total{comm="loadgen",mode="user",pid="4242"} 2.5
# HELP thrashscope_process_swap_bytes Memory swapped out (VmSwap).
# TYPE thrashscope_process_swap_bytes gauge
thrashscope_process_swap_bytes{comm="loadgen",pid="4242"} 5.36870912e+08
# HELP thrashscope_process_virtual_bytes Virtual memory size.
# TYPE thrashscope_process_virtual_bytes gauge
thrashscope_process_virtual_bytes{comm="loadgen",pid="4242"} 1.073741824e+09
# HELP thrashscope_probe_up 1 when the BPF probe is loaded and attached, 0 when it failed or thrashscope runs on procfs alone; way is how its programs reach the kernel's data (fast: Linux 5.17+; portable: older kernels, or --probes.way=portable), empty on procfs alone.
# TYPE thrashscope_probe_up gauge
thrashscope_probe_up{probe="fault_latency",way="fast"} 1
thrashscope_probe_up{probe="major_faults",way="fast"} 1
thrashscope_probe_up{probe="memory_stall",way="fast"} 1
thrashscope_probe_up{probe="memory_stall_sample",way="fast"} 1
thrashscope_probe_up{probe="process_exit",way="fast"} 0
# HELP thrashscope_probe_events_lost_total Kernel events a probe could not count: a full map, a missing fault start, or events the kernel did not hand to the program.
# TYPE thrashscope_probe_events_lost_total counter
thrashscope_probe_events_lost_total{probe="fault_latency"} 0
thrashscope_probe_events_lost_total{probe="major_faults"} 7
thrashscope_probe_events_lost_total{probe="memory_stall"} 0
thrashscope_probe_events_lost_total{probe="memory_stall_sample"} 0
thrashscope_probe_events_lost_total{probe="process_exit"} 0
# HELP thrashscope_probe_program_runs_total Runs of each of thrashscope's BPF programs, as the kernel counts them while BPF statistics are on (sysctl kernel.bpf_stats_enabled=1); absent until they have been.
# TYPE thrashscope_probe_program_runs_total counter
thrashscope_probe_program_runs_total{program="major_fault"} 730
thrashscope_probe_program_runs_total{program="memory_stall"} 0
# HELP thrashscope_probe_program_run_seconds_total Kernel-measured run time of each of thrashscope's BPF programs while BPF statistics are on (sysctl kernel.bpf_stats_enabled=1): what the probes cost the host, per run when divided by probe_program_runs_total.
# TYPE thrashscope_probe_program_run_seconds_total counter
thrashscope_probe_program_run_seconds_total{program="major_fault"} 0.000146
thrashscope_probe_program_run_seconds_total{program="memory_stall"} 0
`
	names := []string{"thrashscope_process_major_faults_total", "thrashscope_process_memory_stall_seconds_total", "thrashscope_process_memory_stall_off_cpu_seconds_total",
		"thrashscope_probe_program_runs_total", "thrashscope_probe_program_run_seconds_total",
		"thrashscope_process_minor_faults_total", "thrashscope_process_cpu_seconds_total", "thrashscope_process_swap_bytes",
		"thrashscope_process_virtual_bytes", "thrashscope_probe_up", "thrashscope_probe_events_lost_total"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	// The histogram: cumulative log2 buckets in seconds.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "thrashscope_major_fault_latency_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() != readout.KindAnon {
				continue
			}
			h := m.GetHistogram()
			if h.GetSampleCount() != 4 || h.GetSampleSum() != 0.0015 {
				t.Errorf("anon latency count %d sum %v, want 4 and 0.0015", h.GetSampleCount(), h.GetSampleSum())
			}
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == 8192e-9 && b.GetCumulativeCount() != 3 {
					t.Errorf("bucket le=8.192µs holds %d, want 3", b.GetCumulativeCount())
				}
			}
			return
		}
	}
	t.Error("no anon major_fault_latency_seconds histogram")
}

type fixedSource struct{ t *pipeline.Tick }

func (f fixedSource) Latest() (*pipeline.Tick, bool) { return f.t, true }

func TestProcfsAloneExportsOnlyUnknownKind(t *testing.T) {
	smp := &sampler.Reading{Processes: []sampler.Process{{
		Process:     procfs.Process{PID: 77, Comm: "thrasher"},
		MajorFaults: readout.FaultCounts{readout.Unknown: 42},
	}}}
	const want = `
# HELP thrashscope_process_major_faults_total Major page faults by kind, from the BPF probe since it first saw the process: anon (private anonymous memory read back from swap), shmem (shared anonymous memory or tmpfs read back from swap), file (a page-cache miss on a real file); unknown when the kind could not be told (or on procfs alone).
# TYPE thrashscope_process_major_faults_total counter
thrashscope_process_major_faults_total{comm="thrasher",kind="unknown",pid="77"} 42
`
	c := NewCollector(fixedSource{&pipeline.Tick{Reading: smp}})
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "thrashscope_process_major_faults_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "thrashscope_process_memory_stall_seconds_total"); n != 0 {
		t.Errorf("%d stall series without the probe, want none", n)
	}
}

// With BPF statistics never on, the kernel's counts are zero: the series
// are left out rather than read as a probe that costs nothing.
func TestProgramStatsAbsentWhileNeverOn(t *testing.T) {
	fp := fakeProbe{snap: readout.Snapshot{
		Processes: map[uint32]readout.ProcessCounters{},
		Programs:  []readout.ProgramStats{{Name: "major_fault"}, {Name: "memory_stall"}},
	}}
	c := collector(t, "../procfs/testdata/proc", fp)
	if n := testutil.CollectAndCount(c, "thrashscope_probe_program_runs_total", "thrashscope_probe_program_run_seconds_total"); n != 0 {
		t.Errorf("%d program statistics series with statistics off, want none", n)
	}
}

// A process whose name is not valid UTF-8 (cut inside a character, or set
// so) or holds a terminal's escape keeps its series under a valid,
// printable label (labelvalue), and the detector's and every
// other process's series are still there: a label Prometheus refuses used
// to panic the collector and drop the rest of the scrape.
func TestInvalidUTF8CommKeepsEverySeries(t *testing.T) {
	s := &sampler.Reading{}
	v := &indicators.Verdict{State: 2, HighFaultCount: 2, Processes: map[int]indicators.ProcessVerdict{}}
	for i, comm := range []string{"dataproc-\xc3", "postgres", "caf\xc3\xa9\xff", "\x1b[2Jwiper"} {
		p := sampler.Process{}
		p.PID, p.Comm = 100+i, comm
		p.MajorFaults[readout.Anon] = 7
		s.Processes = append(s.Processes, p)
		v.Processes[p.PID] = indicators.ProcessVerdict{HighFault: true}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(fixedSource{&pipeline.Tick{Reading: s, Verdict: v}}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	seen := map[string]map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "comm" {
					if seen[mf.GetName()] == nil {
						seen[mf.GetName()] = map[string]bool{}
					}
					seen[mf.GetName()][l.GetValue()] = true
				}
			}
		}
		if mf.GetName() == "thrashscope_thrashing_state" && mf.GetMetric()[0].GetGauge().GetValue() != 2 {
			t.Errorf("thrashing_state %v, want 2", mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	if _, ok := seen["thrashscope_process_high_fault"]; !ok {
		t.Fatal("no thrashscope_process_high_fault series")
	}
	if !slicesContainsName(mfs, "thrashscope_thrashing_state") {
		t.Error("thrashscope_thrashing_state missing from the scrape")
	}
	for _, name := range []string{"thrashscope_process_minor_faults_total", "thrashscope_process_resident_bytes", "thrashscope_process_high_fault"} {
		for _, want := range []string{"dataproc-\uFFFDC3", "postgres", "café\uFFFDFF", "\uFFFD1B[2Jwiper"} {
			if !seen[name][want] {
				t.Errorf("%s: no series with comm %q (have %v)", name, want, seen[name])
			}
		}
	}
}

func slicesContainsName(mfs []*dto.MetricFamily, name string) bool {
	for _, mf := range mfs {
		if mf.GetName() == name {
			return true
		}
	}
	return false
}
