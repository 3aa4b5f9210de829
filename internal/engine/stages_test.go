package engine

import (
	"errors"
	"slices"
	"testing"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/procfs"
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
