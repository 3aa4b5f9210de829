package sampler

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/row"
)

type fakeProbe struct{ snap readout.Snapshot }

func (f *fakeProbe) Read() (readout.Snapshot, error) { return f.snap, nil }
func (f *fakeProbe) Arm(time.Time, readout.Snapshot) {}
func (f *fakeProbe) Status() []readout.Status        { return nil }

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

// setHostMajor rewrites the pgmajfault line of the tree's /proc/vmstat.
func setHostMajor(t *testing.T, root string, n uint64) {
	t.Helper()
	path := filepath.Join(root, "vmstat")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "pgmajfault ") })
	if i < 0 {
		t.Fatal("no pgmajfault line in the vmstat fixture")
	}
	lines[i] = fmt.Sprintf("pgmajfault %d", n)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestProcfsAloneReadsQuietProcessesInTurn: on procfs alone a quiet
// process's stat is read every quietEvery rounds, unless the host's
// pgmajfault shows faults the processes read do not explain; a process that
// starts faulting is then ranked in that very round.
func TestProcfsAloneReadsQuietProcessesInTurn(t *testing.T) {
	const n = 10 * quietEvery
	majflt := map[int]uint64{}
	for pid := 1000; pid < 1000+n; pid++ {
		majflt[pid] = 7
	}
	root := procTree(t, majflt)
	s := newSampler(t, root, nil, 10, nil)
	host := uint64(689)
	for range 3 {
		if err := s.SampleOnce(); err != nil {
			t.Fatal(err)
		}
	}
	// A quiet round reads only the pids whose turn it is (the bookkeeping
	// notes the round each process was last read).
	readThisRound := func() int {
		k := 0
		for _, a := range s.activity {
			if a.readRound == s.round {
				k++
			}
		}
		return k
	}
	if got := readThisRound(); got != n/quietEvery {
		t.Errorf("a quiet round read %d of %d processes, want %d (1 in %d)", got, n, n/quietEvery, quietEvery)
	}
	if len(s.activity) != n {
		t.Errorf("%d processes known, want all %d: one not read this round is still alive", len(s.activity), n)
	}

	// One starts faulting out of turn: the host's count shows it, so
	// the round reads everyone and ranks it.
	pid := 1000 + n/2
	if (s.round+1+pid)%quietEvery == 0 {
		pid++ // out of turn
	}
	writeProc(t, root, pid, 7+300)
	host += 300
	setHostMajor(t, root, host)
	if err := s.SampleOnce(); err != nil {
		t.Fatal(err)
	}
	if got := pids(s); !slices.Equal(got, []int{pid}) {
		t.Fatalf("tracked %v after %d faulted out of turn, want [%d]", got, pid, pid)
	}
	if got := readThisRound(); got != n {
		t.Errorf("the round with unexplained faults read %d of %d processes, want all", got, n)
	}

	// It keeps being read while it faults; the host's faults are all its
	// own, so the others wait for their turn.
	writeProc(t, root, pid, 7+600)
	host += 300
	setHostMajor(t, root, host)
	if err := s.SampleOnce(); err != nil {
		t.Fatal(err)
	}
	if got := readThisRound(); got > n/quietEvery+1 || s.activity[pid].readRound != s.round {
		t.Errorf("explained round read %d processes (want at most %d), the faulting one read: %v", got, n/quietEvery+1, s.activity[pid].readRound == s.round)
	}
	if smp, _ := s.Latest(); len(smp.Processes) != 1 || smp.Processes[0].MajorFaults.Total() != 607 {
		t.Errorf("tracked %+v, want %d with 607 faults", smp.Processes, pid)
	}
}

// testSampler reads with fixed pinned processes and keeps the last reading.
type testSampler struct {
	*Sampler
	pinned []int
	latest *Reading
}

func (s *testSampler) SampleOnce() error {
	r, err := s.Read(s.pinned)
	s.latest = r
	return err
}

func (s *testSampler) Latest() (*Reading, bool) { return s.latest, s.latest != nil }

func newSampler(t *testing.T, root string, p ProbeReader, topK int, pinned []int) *testSampler {
	t.Helper()
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{ProcFS: fs, Interval: time.Second, TopK: topK}
	if p != nil {
		cfg.Probe = p
	}
	return &testSampler{Sampler: New(cfg), pinned: pinned}
}

func pids(s *testSampler) []int {
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
	fp := &fakeProbe{snap: readout.Snapshot{Processes: map[uint32]readout.ProcessCounters{}}}
	s := newSampler(t, root, fp, 3, []int{109})
	for step := uint64(1); step <= 3; step++ {
		for pid := 100; pid < 109; pid++ {
			// pid 100+i takes i*10 faults a second; 109 takes none.
			fp.snap.Processes[uint32(pid)] = readout.ProcessCounters{MajorFaults: readout.FaultCounts{readout.Anon: step * uint64(pid-100) * 10}}
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
	fp := &fakeProbe{snap: readout.Snapshot{Processes: map[uint32]readout.ProcessCounters{
		200: {MajorFaults: readout.FaultCounts{readout.Anon: 50}}, 201: {MajorFaults: readout.FaultCounts{readout.File: 40}},
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
	fp := &fakeProbe{snap: readout.Snapshot{Processes: map[uint32]readout.ProcessCounters{300: {MajorFaults: readout.FaultCounts{readout.Anon: 10}}}}}
	s := newSampler(t, root, fp, 10, nil)
	clock := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	s.cfg.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
	quietFor := -1
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
	setHostMajor(t, root, 689+500) // the host counts the same 500 faults
	if err := s.SampleOnce(); err != nil {
		t.Fatal(err)
	}
	smp, _ := s.Latest()
	if len(smp.Processes) != 1 || smp.Processes[0].PID != 401 {
		t.Fatalf("tracked %v, want [401]", pids(s))
	}
	if p := smp.Processes[0]; p.MajorFaults != (readout.FaultCounts{readout.Unknown: 1500}) || p.HasStall {
		t.Errorf("procfs-alone process: faults %v (want all unknown), HasStall %v (want false)", p.MajorFaults, p.HasStall)
	}
}

func TestRatesBetween(t *testing.T) {
	t0 := time.Unix(1000, 0)
	prev := &Reading{Time: t0,
		CPU:      procfs.CPUSeconds{User: 10, Nice: 0, System: 5, Idle: 85},
		VMStat:   procfs.VMStat{PswpIn: 100, PswpOut: 50, PgpgIn: 1000, PgMajFault: 7},
		Pressure: &procfs.Pressure{SomeTotal: time.Second, FullTotal: 0},
	}
	cur := &Reading{Time: t0.Add(2 * time.Second),
		CPU:      procfs.CPUSeconds{User: 11, Nice: 1, System: 6, Idle: 86, IOWait: 1},
		VMStat:   procfs.VMStat{PswpIn: 300, PswpOut: 40, PgpgIn: 1400, PgMajFault: 27, PgStealAnon: 60, PgStealFile: 40},
		Pressure: &procfs.Pressure{SomeTotal: 2 * time.Second, FullTotal: 500 * time.Millisecond},
	}
	r := RatesBetween(prev, cur)
	want := Rates{
		Host: row.Host{CPUUserPercent: 40, CPUSystemPercent: 20, CPUIOWaitPercent: 20, SwapInPagesPerSecond: 100, SwapOutPagesPerSecond: 0, PagedInKiBPerSecond: 200, MajorFaultsPerSecond: 10, PressureSomePercent: 50, PressureFullPercent: 25}, Seconds: 2, CPUBusyPercent: 60, EvictedPagesPerSecond: 50}
	if r != want {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
	if RatesBetween(cur, cur) != (Rates{}) {
		t.Error("zero interval should give zero rates")
	}
	// A kernel without pgsteal (before 5.8): the swap-outs are what was
	// evicted.
	old := *cur
	old.VMStat.PgStealAnon, old.VMStat.PgStealFile, old.VMStat.PswpOut = 0, 0, 250
	if r := RatesBetween(prev, &old); r.EvictedPagesPerSecond != 100 {
		t.Errorf("evicted %v pages/s without pgsteal, want the 100 swap-outs/s", r.EvictedPagesPerSecond)
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

// TestProcessRatesOneRule: a process's rates are computed once, in the
// sampler, for the same process (pid and start time) in both readings; a
// reused pid and a newcomer have none; a counter that went backwards gives
// 0; stall needs both readings' stall times.
func TestProcessRatesOneRule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	proc := func(pid int, start, anon, file, majflt uint64, stall time.Duration, hasStall bool) Process {
		p := Process{MajorFaults: readout.FaultCounts{readout.Anon: anon, readout.Shmem: anon / 10, readout.File: file}, Stall: readout.StallTime{OffCPU: stall}, HasStall: hasStall}
		p.PID, p.StartTicks, p.Process.MajorFaults = pid, start, majflt
		return p
	}
	prev := &Reading{Time: t0, Processes: []Process{
		proc(1, 100, 1000, 10, 5000, time.Second, true),
		proc(2, 200, 50, 0, 50, 0, true),
		proc(3, 300, 500, 0, 500, 2*time.Second, true),
		proc(5, 500, 0, 0, 0, 0, false),
	}}
	cur := &Reading{Time: t0.Add(2 * time.Second), Processes: []Process{
		proc(1, 100, 3000, 30, 7200, 2500*time.Millisecond, true), // 1000 anon/s, 100 shmem/s, 10 file/s, 75 % stalled
		proc(2, 201, 10, 0, 10, 0, true),                          // pid reused: no rates
		proc(4, 400, 70, 0, 70, 0, true),                          // new: no rates
		proc(3, 300, 20, 0, 520, time.Second, true),               // the probe's counters restarted: 0, not negative
		proc(5, 500, 0, 0, 0, time.Second, true),                  // stall seen only now
	}}
	Complete(prev, cur)
	if !cur.HasRates || cur.Rates.Seconds != 2 {
		t.Fatalf("host rates: %+v", cur.Rates)
	}
	p := cur.Processes[0]
	want := ProcessRates{Faults: FaultRates{readout.Anon: 1000, readout.Shmem: 100, readout.File: 10}, MajFlt: 1100, StallPercent: 75, HasStall: true}
	if !p.HasRates || p.Rates != want {
		t.Errorf("pid 1: %v %+v, want %+v", p.HasRates, p.Rates, want)
	}
	if got := p.Rates.Faults.SwapIns(); got != 1100 || p.Rates.Faults.Total() != 1110 {
		t.Errorf("pid 1: swap-ins %v, total %v; want 1100, 1110", got, p.Rates.Faults.Total())
	}
	for _, i := range []int{1, 2} {
		if q := cur.Processes[i]; q.HasRates {
			t.Errorf("pid %d has rates without the same process before: %+v", q.PID, q.Rates)
		}
	}
	if q := cur.Processes[3]; !q.HasRates || q.Rates.Faults.Total() != 0 || q.Rates.MajFlt != 10 || q.Rates.StallPercent != 0 {
		t.Errorf("pid 3 after the probe's counters restarted: %+v", q.Rates)
	}
	if q := cur.Processes[4]; !q.HasRates || q.Rates.HasStall {
		t.Errorf("pid 5 has a stall rate from one reading: %+v", q.Rates)
	}
}

// The rates of a reading whose source failed, and of the one after, are not
// computed: they would span the gap. The defect: vmstat emptied for a
// reading recorded 0 swap-ins/s, then a row of 15,822,554/s (the counter
// since boot over one interval), which a report took for the peak.
func TestNoRatesAcrossAFailedSource(t *testing.T) {
	root := procTree(t, nil)
	vmstat, _ := os.ReadFile(filepath.Join(root, "vmstat"))
	fs, _ := procfs.NewFS(root)
	var logs strings.Builder
	s := New(Config{ProcFS: fs, TopK: 5, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	read := func() *Reading {
		t.Helper()
		r, _ := s.Read(nil)
		return r
	}
	read()
	if r := read(); !r.HasRates || !r.Whole() {
		t.Fatalf("a whole reading after a whole one: rates %v, whole %v", r.HasRates, r.Whole())
	}
	os.WriteFile(filepath.Join(root, "vmstat"), nil, 0o644)
	for range 3 {
		r := read()
		if r.Failed[SourceVMStat] == nil || r.HasRates || r.OK(SourceVMStat) {
			t.Fatalf("vmstat emptied: failed %v, rates %v", r.Failed[SourceVMStat], r.HasRates)
		}
		if r.Failed[SourceStat] != nil || !r.OK(SourceMeminfo) {
			t.Errorf("the other sources were read: %v", r.Failed)
		}
	}
	os.WriteFile(filepath.Join(root, "vmstat"), vmstat, 0o644)
	if r := read(); r.HasRates || !r.Whole() {
		t.Errorf("the first reading after the gap: rates %v (the interval spans the gap), whole %v", r.HasRates, r.Whole())
	}
	r := read()
	if !r.HasRates || r.Rates.SwapInPagesPerSecond != 0 {
		t.Errorf("the second reading after the gap: rates %v, swap-ins %g/s; want rates, and 0 (the counter did not move)", r.HasRates, r.Rates.SwapInPagesPerSecond)
	}
	if r.Failures[SourceVMStat] != 3 {
		t.Errorf("%d failed vmstat reads counted, want 3", r.Failures[SourceVMStat])
	}
	if n := strings.Count(logs.String(), "a source failed"); n != 1 || strings.Count(logs.String(), "a source reads again") != 1 {
		t.Errorf("the failure was logged %d times, want once, and its end once:\n%s", n, logs.String())
	}
}

// A kernel without PSI has no pressure source; once one was read, its file
// gone is a failed read, not a kernel that lost PSI (its stall shares would
// read as 0 % in a run's rows).
func TestPressureGoneAfterItWasRead(t *testing.T) {
	root := procTree(t, nil)
	fs, _ := procfs.NewFS(root)
	s := New(Config{ProcFS: fs, TopK: 5})
	if r, _ := s.Read(nil); r.Used[SourcePressure] || !r.Whole() {
		t.Fatalf("no PSI: used %v, whole %v", r.Used[SourcePressure], r.Whole())
	}
	os.MkdirAll(filepath.Join(root, "pressure"), 0o755)
	os.WriteFile(filepath.Join(root, "pressure", "memory"), []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"), 0o644)
	if r, _ := s.Read(nil); !r.OK(SourcePressure) {
		t.Fatalf("PSI there: %v", r.Failed[SourcePressure])
	}
	os.Remove(filepath.Join(root, "pressure", "memory"))
	if r, _ := s.Read(nil); r.Failed[SourcePressure] == nil || r.HasRates {
		t.Errorf("PSI gone after it was read: failed %v, rates %v", r.Failed[SourcePressure], r.HasRates)
	}
}
