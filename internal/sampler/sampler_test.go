package sampler

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/procfs"
)

type fakeProbe struct{ snap probe.Snapshot }

func (f *fakeProbe) Read() (probe.Snapshot, error) { return f.snap, nil }
func (f *fakeProbe) Status() []probe.Status        { return nil }

// procTree builds a procfs tree: the fixture system files plus one process
// per pid with the given major-fault count.
func procTree(t *testing.T, majflt map[int]uint64) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range []string{"stat", "vmstat", "meminfo"} {
		b, err := os.ReadFile(filepath.Join("../procfs/testdata/proc", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for pid, maj := range majflt {
		writeProc(t, root, pid, maj)
	}
	return root
}

func writeProc(t *testing.T, root string, pid int, majflt uint64) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (proc-%d) S 1 1 1 0 -1 0 10 0 %d 0 5 5 0 0 20 0 1 0 %d 1000000 100 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n", pid, pid, majflt, 1000+pid)
	status := fmt.Sprintf("Name:\tproc-%d\nVmSize:\t1000 kB\nVmRSS:\t400 kB\nVmSwap:\t8 kB\n", pid)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newSampler(t *testing.T, root string, p ProbeReader, topK int, pinned []int) *Sampler {
	t.Helper()
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{ProcFS: fs, Interval: time.Second, TopK: topK, Pinned: func() []int { return pinned }}
	if p != nil {
		cfg.Probe = p
	}
	return New(cfg)
}

func pids(s *Sampler) []int {
	smp, _ := s.Latest()
	var out []int
	for _, p := range smp.Processes {
		out = append(out, p.PID)
	}
	return out
}

func TestTopKBoundedBusiestFirstPlusPinned(t *testing.T) {
	procs := map[int]uint64{}
	for pid := 100; pid < 110; pid++ {
		procs[pid] = 0
	}
	root := procTree(t, procs)
	fp := &fakeProbe{snap: probe.Snapshot{Processes: map[uint32]probe.ProcessCounters{}}}
	s := newSampler(t, root, fp, 3, []int{109})
	for step := uint64(1); step <= 3; step++ {
		for pid := 100; pid < 109; pid++ {
			// pid 100+i takes i*10 faults a second; 109 takes none.
			fp.snap.Processes[uint32(pid)] = probe.ProcessCounters{MajorFaults: probe.FaultCounts{probe.Anon: step * uint64(pid-100) * 10}}
		}
		if err := s.SampleOnce(); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := pids(s), []int{108, 107, 106, 109}; !slices.Equal(got, want) {
		t.Errorf("tracked %v, want the top 3 busiest then the pinned one: %v", got, want)
	}
	smp, _ := s.Latest()
	if smp.Processes[0].Comm != "proc-108" || smp.Processes[0].SwapBytes != 8192 || !smp.Processes[0].HasStall {
		t.Errorf("tracked process not read in full: %+v", smp.Processes[0])
	}
}

func TestExitedProcessDropsOut(t *testing.T) {
	root := procTree(t, map[int]uint64{200: 0, 201: 0})
	fp := &fakeProbe{snap: probe.Snapshot{Processes: map[uint32]probe.ProcessCounters{
		200: {MajorFaults: probe.FaultCounts{probe.Anon: 50}}, 201: {MajorFaults: probe.FaultCounts{probe.File: 40}},
	}}}
	s := newSampler(t, root, fp, 10, nil)
	if err := s.SampleOnce(); err != nil {
		t.Fatal(err)
	}
	if got := pids(s); !slices.Equal(got, []int{200, 201}) {
		t.Fatalf("tracked %v, want [200 201]", got)
	}
	// 201 exits: the probe forgets it and /proc/201 goes away.
	delete(fp.snap.Processes, 201)
	if err := os.RemoveAll(filepath.Join(root, "201")); err != nil {
		t.Fatal(err)
	}
	if err := s.SampleOnce(); err != nil {
		t.Fatal(err)
	}
	if got := pids(s); !slices.Equal(got, []int{200}) {
		t.Errorf("tracked %v after 201 exited, want [200]", got)
	}
}

func TestQuietProcessDecaysOut(t *testing.T) {
	root := procTree(t, map[int]uint64{300: 0})
	fp := &fakeProbe{snap: probe.Snapshot{Processes: map[uint32]probe.ProcessCounters{300: {MajorFaults: probe.FaultCounts{probe.Anon: 10}}}}}
	s := newSampler(t, root, fp, 10, nil)
	quietFor := 0
	for i := range 100 {
		if err := s.SampleOnce(); err != nil {
			t.Fatal(err)
		}
		if len(pids(s)) == 0 {
			quietFor = i
			break
		}
	}
	// 10 faults once, then silence: about 1.3 f/s decaying by 0.87 a
	// second falls under 0.01 f/s after about 35 intervals.
	if quietFor < 20 || quietFor > 50 {
		t.Errorf("a process quiet since one burst left the top-K after %d intervals, want 20-50", quietFor)
	}
}

func TestProcfsAloneRanksByMajFlt(t *testing.T) {
	root := procTree(t, map[int]uint64{400: 1000, 401: 1000})
	s := newSampler(t, root, nil, 10, nil)
	if err := s.SampleOnce(); err != nil {
		t.Fatal(err)
	}
	// The whole history at first sight is not a burst.
	if got := pids(s); len(got) != 0 {
		t.Errorf("tracked %v on the first sample, want none", got)
	}
	writeProc(t, root, 401, 1500)
	if err := s.SampleOnce(); err != nil {
		t.Fatal(err)
	}
	smp, _ := s.Latest()
	if len(smp.Processes) != 1 || smp.Processes[0].PID != 401 {
		t.Fatalf("tracked %v, want [401]", pids(s))
	}
	if p := smp.Processes[0]; p.MajorFaults != (probe.FaultCounts{probe.Unknown: 1500}) || p.HasStall {
		t.Errorf("procfs-alone process: faults %v (want all unknown), HasStall %v (want false)", p.MajorFaults, p.HasStall)
	}
}

func TestRatesBetween(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := &Sample{Time: t0,
		CPU:      procfs.CPUSeconds{User: 10, Nice: 0, System: 5, Idle: 85},
		VMStat:   procfs.VMStat{PswpIn: 100, PswpOut: 50, PgpgIn: 1000, PgMajFault: 7},
		Pressure: &procfs.Pressure{SomeTotal: time.Second, FullTotal: 0},
	}
	cur := &Sample{Time: t0.Add(2 * time.Second),
		CPU:      procfs.CPUSeconds{User: 11, Nice: 1, System: 6, Idle: 86, IOWait: 1},
		VMStat:   procfs.VMStat{PswpIn: 300, PswpOut: 40, PgpgIn: 1400, PgMajFault: 27},
		Pressure: &procfs.Pressure{SomeTotal: 2 * time.Second, FullTotal: 500 * time.Millisecond},
	}
	r := RatesBetween(prev, cur)
	want := Rates{Seconds: 2, CPUUserPercent: 40, CPUSystemPercent: 20, CPUIOWaitPercent: 20, CPUBusyPercent: 60,
		SwapInPagesPerSecond: 100, SwapOutPagesPerSecond: 0, PagedInKiBPerSecond: 200, MajorFaultsPerSecond: 10,
		PressureSomePercent: 50, PressureFullPercent: 25}
	if r != want {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
	if RatesBetween(cur, cur) != (Rates{}) {
		t.Error("zero interval should give zero rates")
	}

	// PSI is read late in a sample; its share is over the time between
	// its own reads. Here the samples start 2 s apart but the reads were
	// 1 s apart (the earlier read was slow), so 0.5 s stalled is 50 %.
	prev.PressureTime, cur.PressureTime = t0.Add(900*time.Millisecond), t0.Add(1900*time.Millisecond)
	cur.Pressure = &procfs.Pressure{SomeTotal: 1500 * time.Millisecond, FullTotal: 250 * time.Millisecond}
	if r := RatesBetween(prev, cur); r.PressureSomePercent != 50 || r.PressureFullPercent != 25 {
		t.Errorf("PSI over its own read times: some %v %%, full %v %%; want 50, 25", r.PressureSomePercent, r.PressureFullPercent)
	}
}
