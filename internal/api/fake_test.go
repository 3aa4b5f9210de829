package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeRuns is a run engine in memory. Like the real one it resolves and
// validates specs with loadgen, refuses a second active run, and refuses
// an anon run whose demand exceeds its limit (this host has no swap).
// Every error comes back wrapped, as the real manager's may.
type fakeRuns struct {
	mu   sync.Mutex
	recs []run.Record // newest first
	// err, when set, is what every method fails with.
	err error
	// samplesErr fails WriteSamples after the header row.
	samplesErr error
}

// newFakeRuns holds one completed run, run-1, and with active a running
// run-2 too.
func newFakeRuns(active bool) *fakeRuns {
	rs, err := run.Resolve(run.Spec{Preset: "e4", Scale: ptr(0.1), Backing: ptr(run.BackingFile)})
	if err != nil {
		panic(err)
	}
	ended := t0.Add(rs.Duration())
	done := run.Record{
		ID: "run-1", Spec: rs, State: run.StateCompleted, StartedAt: t0, EndedAt: &ended,
		Cgroup:    "/sys/fs/cgroup/memory/thrashscope/run-1",
		Consumers: plan(rs, t0),
		Transitions: []run.Transition{
			{At: t0.Add(20 * time.Second), To: "monitoring"},
			{At: t0.Add(25 * time.Second), To: "thrashing", Processes: []string{"consumer-00", "consumer-01"}},
			{At: t0.Add(50 * time.Second), To: "normal"},
		},
		Decisions: []run.Decision{
			{At: t0.Add(26 * time.Second), Kind: "protect", Consumer: 1, Why: "thrashing: the high-fault consumer with the least demand − RSS (2 MiB)"},
			{At: t0.Add(30 * time.Second), Kind: "release", Consumer: 1, Why: "its swap-ins fell to 0.0/s, below PF_Low 1", Error: "asking it to unlock its region: broken pipe"},
		},
	}
	for i := range done.Consumers {
		c := &done.Consumers[i]
		start, end := c.PlannedStart.Add(time.Millisecond), c.PlannedEnd.Add(time.Duration(i)*time.Millisecond)
		c.PID, c.ActualStart, c.ActualEnd = 1000+i, &start, &end
		c.Cycles, c.LatenessSeconds, c.Exit = 42, end.Sub(c.PlannedEnd).Seconds(), "ok"
	}
	f := &fakeRuns{recs: []run.Record{done}}
	if active {
		// A pending run with no consumers planned yet: the API must still
		// send consumers as a list.
		f.recs = slices.Insert(f.recs, 0, run.Record{ID: "run-2", Spec: rs, State: run.StatePending, StartedAt: ended, Cgroup: "/sys/fs/cgroup/memory/thrashscope/run-2"})
	}
	return f
}

func plan(rs run.Resolved, start time.Time) []run.ConsumerRecord {
	var cs []run.ConsumerRecord
	for _, s := range rs.Schedule() {
		cs = append(cs, run.ConsumerRecord{Index: s.Index, PlannedStart: start.Add(s.Start), PlannedEnd: start.Add(s.End)})
	}
	return cs
}

func ptr[T any](v T) *T { return &v }

func (f *fakeRuns) Start(spec run.Spec) (run.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return run.Record{}, f.err
	}
	rs, err := run.Resolve(spec)
	if err != nil {
		return run.Record{}, fmt.Errorf("resolving the spec: %w", err)
	}
	for _, r := range f.recs {
		if run.Active(r.State) {
			return run.Record{}, fmt.Errorf("run %s is %s: %w", r.ID, r.State, run.ErrBusy)
		}
	}
	if rs.Backing == run.BackingAnon && rs.Demand() > rs.MemoryLimitBytes {
		return run.Record{}, fmt.Errorf("checking the budget: %w", &run.UnsafeError{
			Msg: "no swap configured: an anon thrash would OOM; add swap (fallocate, mkswap, swapon) or use backing=file"})
	}
	id := fmt.Sprintf("run-%d", len(f.recs)+1)
	rec := run.Record{ID: id, Spec: rs, State: run.StateRunning, StartedAt: t0,
		Cgroup: "/sys/fs/cgroup/memory/thrashscope/" + id, Consumers: plan(rs, t0)}
	f.recs = slices.Insert(f.recs, 0, rec)
	return rec, nil
}

func (f *fakeRuns) List(_ context.Context, after string, n int) ([]run.Summary, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, "", f.err
	}
	i := 0
	if after != "" {
		i = slices.IndexFunc(f.recs, func(r run.Record) bool { return r.ID == after }) + 1
	}
	var page []run.Summary
	for _, r := range f.recs[i:min(i+n, len(f.recs))] {
		page = append(page, r.Summary())
	}
	next := ""
	if i+n < len(f.recs) {
		next = f.recs[i+n-1].ID
	}
	return page, next, nil
}

func (f *fakeRuns) find(id string) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	i := slices.IndexFunc(f.recs, func(r run.Record) bool { return r.ID == id })
	if i < 0 {
		return 0, fmt.Errorf("run %s: %w", id, run.ErrNotFound)
	}
	return i, nil
}

func (f *fakeRuns) WriteRecord(_ context.Context, id string, w io.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(id)
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(wire(f.recs[i]))
}

func (f *fakeRuns) Abort(id string) (run.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(id)
	if err != nil {
		return run.Record{}, err
	}
	if r := &f.recs[i]; run.Active(r.State) {
		end := r.StartedAt.Add(3 * time.Second)
		r.State, r.Reason, r.EndedAt = run.StateAborted, "aborted over the API", &end
	}
	return f.recs[i], nil
}

const samplesHeader = "elapsed_seconds,cpu_user_percent,cpu_system_percent,swap_in_pages_per_second,swap_out_pages_per_second,major_faults_per_second\n"

func (f *fakeRuns) WriteSamples(_ context.Context, id string, w io.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.find(id); err != nil {
		return err
	}
	if _, err := io.WriteString(w, samplesHeader); err != nil {
		return err
	}
	if f.samplesErr != nil {
		return f.samplesErr
	}
	_, err := io.WriteString(w, "1,12.5,3.1,0,0,0\n2,10.2,20.7,1840,2210,1750\n")
	return err
}
