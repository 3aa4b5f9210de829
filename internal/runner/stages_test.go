package runner

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/row"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/store"
)

// fakeRunning is a run in progress held in memory: what the stages read of
// it is set by the test, what they do to it is kept.
type fakeRunning struct {
	changes     uint64
	rec         run.Record
	progress    run.Progress
	pids        []int
	usage       int64
	usageErr    error
	transitions []run.Transition
	governed    []policy.Tick
	done        chan struct{}
}

func (f *fakeRunning) Record() run.Record     { return f.rec }
func (f *fakeRunning) Progress() run.Progress { return f.progress }
func (f *fakeRunning) PolicyState() run.PolicyState {
	return run.PolicyState{Policy: f.rec.Spec.Policy}
}
func (f *fakeRunning) PIDs() []int                     { return f.pids }
func (f *fakeRunning) MemoryUsage() (int64, error)     { return f.usage, f.usageErr }
func (f *fakeRunning) AddTransition(tr run.Transition) { f.transitions = append(f.transitions, tr) }
func (f *fakeRunning) Govern(t policy.Tick)            { f.governed = append(f.governed, t) }
func (f *fakeRunning) FillRows() []store.FillRow       { return nil }
func (f *fakeRunning) Abort(string)                    {}
func (f *fakeRunning) Done() <-chan struct{}           { return f.done }
func (f *fakeRunning) Changes() uint64                 { return f.changes }
func (f *fakeRunning) CycleDurations() run.CycleHistogram {
	return run.CycleHistogram{}
}

func newFakeRunning(policyName string) *fakeRunning {
	_, st := rowsFixture()
	st.Record.Spec.Policy = policyName
	st.Record.Spec.MemoryLimitBytes = 128 << 20
	return &fakeRunning{rec: st.Record, progress: st.Progress, pids: st.LivePIDs, usage: 90 << 20, done: make(chan struct{})}
}

// The source is the active run's live consumers and limit, and nothing
// without a run.
func TestSourceScope(t *testing.T) {
	var cur Running
	s := Source{current: func() Running { return cur }}
	if got := s.Scope(); got.PIDs != nil || got.LimitBytes != 0 {
		t.Errorf("no run: scope %+v, want the zero scope", got)
	}
	cur = newFakeRunning("none")
	if got := s.Scope(); !slices.Equal(got.PIDs, []int{101, 103}) || got.LimitBytes != 128<<20 {
		t.Errorf("scope %+v, want the live consumers 101 and 103 and the 128 MiB limit", got)
	}
}

// The recorder appends a row a tick to the run's tables, records the
// detector's transitions, and asks for the tables to be saved every
// saveEvery rows and for a changed record every recordEvery rows between.
func TestRecorderRowsTransitionsAndSaves(t *testing.T) {
	tick, _ := rowsFixture()
	fr := newFakeRunning("none")
	a := &active{run: fr, table: &store.Table{}, processes: &store.ProcessTable{}}
	type saveCall struct {
		row        int
		withTables bool
	}
	var saves []saveCall
	rows := 0
	r := Recorder{current: func() *active { return a }, save: func(_ *active, withTables bool) {
		saves = append(saves, saveCall{rows, withTables})
	}}

	withTransition := *tick
	v := *tick.Verdict
	v.Transition = &indicators.Transition{At: *at(12.5), To: indicators.Thrashing, Names: []string{"consumer-00"}}
	withTransition.Verdict = &v
	r.Observe(nil, &withTransition)
	rows++
	if len(fr.transitions) != 1 || fr.transitions[0].To != indicators.StateNames[indicators.Thrashing] || !slices.Equal(fr.transitions[0].Processes, []string{"consumer-00"}) {
		t.Errorf("transitions %+v, want the one to thrashing naming consumer-00", fr.transitions)
	}
	fr.changes++ // a consumer started
	for range 2*saveEvery - 1 {
		r.Observe(tick, tick)
		rows++
	}
	want := []saveCall{{recordEvery, false}, {saveEvery, true}, {2 * saveEvery, true}}
	for i := range want {
		want[i].row-- // saves are asked for while the row is taken, before rows++
	}
	if !slices.Equal(saves, want) {
		t.Errorf("saves %+v, want the changed record at row %d, the tables at rows %d and %d", saves, recordEvery, saveEvery, 2*saveEvery)
	}
	if got := countLines(a.table.CSV()) - 1; got != 2*saveEvery {
		t.Errorf("samples.csv has %d rows, want %d", got, 2*saveEvery)
	}
	if got := countLines(a.processes.CSV()) - 1; got != 2*2*saveEvery {
		t.Errorf("processes.csv has %d rows, want %d (the two live consumers read each tick)", got, 2*2*saveEvery)
	}

	// A tick without rates (the first reading) adds no row; no run, nothing.
	noRates := &pipeline.Tick{Reading: &sampler.Reading{Time: *at(13)}}
	r.Observe(nil, noRates)
	a = nil
	r.Observe(tick, tick)
	if len(saves) != len(want) {
		t.Errorf("a tick without rates or without a run asked for a save")
	}
}

func countLines(b []byte) int {
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}

// The governor shows the run's policy the tick, with the cgroup's room;
// it leaves a run under none alone, and a run that ended, and reads the
// consumers' swap only for binpack.
func TestGovernor(t *testing.T) {
	tick, _ := rowsFixture()
	var cur Running
	fs, err := procfs.NewFS("../procfs/testdata/proc")
	if err != nil {
		t.Fatal(err)
	}
	g := Governor{current: func() Running { return cur }, procFS: fs}
	g.Observe(nil, tick) // no run
	for _, c := range []struct {
		policy       string
		usageErr     error
		ended        bool
		wantGoverned bool
		wantFree     int64
		wantSwap     int64
	}{
		{policy: "none"},
		{policy: "tpf", wantGoverned: true, wantFree: (128 - 90) << 20},
		{policy: "calmdown", usageErr: errors.New("gone"), wantGoverned: true, wantFree: 0},
		{policy: "tpf", ended: true},
		{policy: "binpack", wantGoverned: true, wantFree: (128 - 90) << 20, wantSwap: 512 << 20},
	} {
		fr := newFakeRunning(c.policy)
		fr.rec.Consumers[0].PID = 4242 // the fixture's process with 512 MiB swapped
		tick.Reading.Processes[1].PID = 4242
		fr.usageErr = c.usageErr
		if c.ended {
			close(fr.done)
		}
		cur = fr
		g.Observe(nil, tick)
		if got := len(fr.governed) == 1; got != c.wantGoverned {
			t.Errorf("%s (ended %v): governed %d times, want %v", c.policy, c.ended, len(fr.governed), c.wantGoverned)
			continue
		}
		if c.wantGoverned {
			pt := fr.governed[0]
			if pt.FreeBytes != c.wantFree || pt.LimitBytes != 128<<20 || len(pt.Consumers) != 2 || pt.Consumers[0].SwapInRate != 250 || pt.Consumers[0].SwapBytes != c.wantSwap {
				t.Errorf("%s: policy tick %+v, want %d free of 128 MiB and the started consumers 0 (%d bytes swapped) and 2", c.policy, pt, c.wantFree, c.wantSwap)
			}
		}
	}
}

var start = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func at(sec float64) *time.Time {
	t := start.Add(time.Duration(sec * float64(time.Second)))
	return &t
}

func tracked(pid int, comm string, rates *sampler.ProcessRates, hasStall bool) sampler.Process {
	p := sampler.Process{HasStall: hasStall}
	p.PID, p.Comm, p.ResidentBytes, p.SwapBytes = pid, comm, 60<<20, 40<<20
	if rates != nil {
		p.Rates, p.HasRates = *rates, true
	}
	return p
}

// rowsFixture is an e4-like run 12.5 s in: consumer 0 running with rates,
// consumer 1 ended (its pid now another process's), consumer 2 started
// after the tick's reading and seen once, and a process of the host.
func rowsFixture() (*pipeline.Tick, runState) {
	spec := run.Resolved{Preset: "e4", SizeBytes: 100 << 20}
	rec := run.Record{ID: "r", Spec: spec, StartedAt: start, Consumers: []run.ConsumerRecord{
		{Index: 0, PID: 101, ActualStart: at(1)},
		{Index: 1, PID: 102, ActualStart: at(2), ActualEnd: at(10)},
		{Index: 2, PID: 103, ActualStart: at(13)},
	}}
	reading := &sampler.Reading{
		Time: *at(12.5), HasRates: true,
		Rates:  sampler.Rates{Host: row.Host{CPUUserPercent: 10, CPUSystemPercent: 30, SwapInPagesPerSecond: 40000, SwapOutPagesPerSecond: 39000, PressureFullPercent: 61}, Seconds: 1},
		Memory: procfs.Memory{AvailableBytes: 8 << 30, SwapFreeBytes: 3 << 30},
		Processes: []sampler.Process{
			tracked(500, "postgres", &sampler.ProcessRates{MajFlt: 9}, true),
			tracked(101, "consumer-00", &sampler.ProcessRates{MajFlt: 250, StallPercent: 40, HasStall: true}, true),
			tracked(102, "reused", &sampler.ProcessRates{MajFlt: 7}, true),
			tracked(103, "consumer-02", nil, true),
		},
	}
	verdict := &indicators.Verdict{Processes: map[int]indicators.ProcessVerdict{
		101: {WorkingSetBytes: 70 << 20, HasWorkingSet: true},
		500: {WorkingSetBytes: 1 << 20, HasWorkingSet: true},
	}}
	st := runState{
		Record:           rec,
		Progress:         run.Progress{Active: 1, Planned: 2, DemandBytes: 100 << 20},
		LivePIDs:         []int{101, 103},
		CgroupUsageBytes: 90 << 20,
	}
	return &pipeline.Tick{Reading: reading, Verdict: verdict}, st
}

func TestRowsOfATick(t *testing.T) {
	tick, st := rowsFixture()
	got, procs := rowsOf(tick, st)
	want := store.Row{
		Host:                 row.Host{CPUUserPercent: 10, CPUSystemPercent: 30, SwapInPagesPerSecond: 40000, SwapOutPagesPerSecond: 39000, PressureFullPercent: 61},
		ElapsedSeconds:       12.5,
		MemoryAvailableBytes: 8 << 30, SwapFreeBytes: 3 << 30,
		ConsumersActive: 1, ConsumersPlanned: 2, DemandBytes: 100 << 20, CgroupUsageBytes: 90 << 20,
		ConsumerStallPercent: 40, // consumer 0's; consumer 2 has no rate yet
	}
	if got != want {
		t.Errorf("samples row\n got %+v\nwant %+v", got, want)
	}
	wantProcs := []store.ProcessRow{
		{ElapsedSeconds: 12.5, Consumer: 0, PID: 101, Comm: "consumer-00", DemandBytes: 100 << 20,
			ResidentBytes: 60 << 20, SwapBytes: 40 << 20, WorkingSetBytes: 70 << 20, MajorFaultsPerSecond: 250, StallPercent: 40},
		// Started after the reading: no demand yet; first seen: no rates,
		// no working set.
		{ElapsedSeconds: 12.5, Consumer: 2, PID: 103, Comm: "consumer-02", DemandBytes: 0,
			ResidentBytes: 60 << 20, SwapBytes: 40 << 20, WorkingSetBytes: -1, MajorFaultsPerSecond: -1, StallPercent: -1},
	}
	if len(procs) != len(wantProcs) {
		t.Fatalf("%d process rows, want %d (live consumers only): %+v", len(procs), len(wantProcs), procs)
	}
	for i := range wantProcs {
		if procs[i] != wantProcs[i] {
			t.Errorf("process row %d\n got %+v\nwant %+v", i, procs[i], wantProcs[i])
		}
	}
}

// Without the stall probe the consumers' stall is unknown, not 0; an
// unreadable cgroup usage is 0, as samples.csv has always had it.
func TestRowsWithoutStallOrUsage(t *testing.T) {
	tick, st := rowsFixture()
	for i := range tick.Reading.Processes {
		tick.Reading.Processes[i].HasStall = false
		tick.Reading.Processes[i].Rates.HasStall = false
	}
	st.CgroupUsageBytes = -1
	tick.Verdict = nil
	row, procs := rowsOf(tick, st)
	if row.ConsumerStallPercent != -1 || row.CgroupUsageBytes != 0 {
		t.Errorf("stall %v, usage %d; want -1 and 0", row.ConsumerStallPercent, row.CgroupUsageBytes)
	}
	if procs[0].StallPercent != -1 || procs[0].WorkingSetBytes != -1 {
		t.Errorf("consumer 0 without probe or indicators: %+v", procs[0])
	}
}

// The fill preset's one consumer demands what it has filled so far.
func TestRowsFillDemand(t *testing.T) {
	tick, st := rowsFixture()
	st.Record.Spec.Preset = run.PresetFill
	st.Progress.DemandBytes = 384 << 20
	_, procs := rowsOf(tick, st)
	if procs[0].DemandBytes != 384<<20 {
		t.Errorf("fill consumer demand %d, want the progress's %d", procs[0].DemandBytes, 384<<20)
	}
}

func TestPolicyTick(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) *time.Time { v := t0.Add(time.Duration(s) * time.Second); return &v }
	rec := run.Record{
		Spec: run.Resolved{SizeBytes: 200 << 20, MemoryLimitBytes: 256 << 20, Policy: "tpf"},
		Consumers: []run.ConsumerRecord{
			{Index: 0, PID: 100, ActualStart: at(0)},                               // active
			{Index: 1, PID: 101, ActualStart: at(1), ActualEnd: at(9), Exit: "ok"}, // ended
			{Index: 2, PID: 102, ActualStart: at(2)},                               // active, not read this tick
			{Index: 3},                                                             // not started
		},
	}
	tick := &pipeline.Tick{
		Reading: &sampler.Reading{Time: t0.Add(10 * time.Second), HasRates: true,
			Rates: sampler.Rates{CPUBusyPercent: 42},
			Processes: []sampler.Process{
				{Process: procfs.Process{PID: 100, ResidentBytes: 150 << 20}, HasRates: true, Rates: sampler.ProcessRates{MajFlt: 300}},
				{Process: procfs.Process{PID: 999, ResidentBytes: 1 << 30}, HasRates: true, Rates: sampler.ProcessRates{MajFlt: 7}},
			}},
		Verdict: &indicators.Verdict{State: indicators.Thrashing, Processes: map[int]indicators.ProcessVerdict{100: {HighFault: true}}},
	}
	swap := map[int]int64{100: 40 << 20, 102: 5 << 20}
	own := func(pid int) (int64, int64, bool) { return swap[pid] * 3, swap[pid], true }
	got := policyTick(tick, rec, 250<<20, own)
	if !got.Thrashing || got.CPUBusyPercent != 42 || got.LimitBytes != 256<<20 || got.FreeBytes != 6<<20 || !got.Now.Equal(t0.Add(10*time.Second)) {
		t.Errorf("tick %+v: want thrashing, 42 %% busy, 256 MiB limit with 6 MiB free, at t0+10s", got)
	}
	if len(got.Consumers) != 2 {
		t.Fatalf("consumers %+v: want the two active ones, 0 and 2", got.Consumers)
	}
	c0, c2 := got.Consumers[0], got.Consumers[1]
	if c0.Index != 0 || c0.ResidentBytes != 150<<20 || c0.OwnResidentBytes != 120<<20 || c0.SwapBytes != 40<<20 || c0.SwapInRate != 300 || !c0.HighFault || c0.DemandBytes != 200<<20 || !c0.Since.Equal(t0) {
		t.Errorf("consumer 0: %+v", c0)
	}
	if c2.Index != 2 || c2.ResidentBytes != 0 || c2.OwnResidentBytes != 15<<20 || c2.SwapBytes != 5<<20 || c2.SwapInRate != 0 || c2.HighFault {
		t.Errorf("consumer 2 (not read this tick): %+v, want its swap and zeros", c2)
	}
	if full := policyTick(tick, rec, 300<<20, nil); full.FreeBytes != 0 || full.Consumers[0].SwapBytes != 0 {
		t.Errorf("usage past the limit, no sizes read: free %d, %+v; want 0 free, no swap", full.FreeBytes, full.Consumers[0])
	}
}

func TestPolicyLine(t *testing.T) {
	for _, c := range []struct {
		s    run.PolicyState
		want string
	}{
		{run.PolicyState{Policy: "none"}, ""},
		{run.PolicyState{Policy: "tpf"}, "policy tpf: 0 frozen, 0 protected; no action yet"},
		{run.PolicyState{Policy: "binpack", Frozen: 8, Gauges: map[string]float64{"bin": 2, "bins": 3}, State: "bin 2 of 3 running", Last: &run.Decision{Kind: "thaw", Consumer: 4, Why: "bin 2 of 3"}},
			"policy binpack: 8 frozen, 0 protected, bin 2 of 3 running; last: thaw consumer 4 (bin 2 of 3)"},
	} {
		if got := PolicyLine(c.s); got != c.want {
			t.Errorf("PolicyLine(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}
