// The manager as the API's backend: the run list, a record, its samples, an
// abort, and the live status.

package runs

import (
	"context"
	"io"
	"maps"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
)

// List is a page of the runs, newest first (see store.Summaries): at most
// n, after the run id after. A run the manager holds in memory (the last
// one, active or not) is listed as it stands, the others as saved.
func (m *Manager) List(ctx context.Context, after string, n int) ([]run.Summary, string, error) {
	page, next, err := m.cfg.Store.Summaries(ctx, after, n)
	for i := range page {
		if rec, ok := m.inMemory(page[i].ID); ok {
			page[i] = rec.Summary()
		}
	}
	return page, next, err
}

// inMemory is a run whose record the manager holds: the last one, active
// or ended (its final save may still be retried), or one a predecessor left
// whose marking as aborted has not been saved yet.
func (m *Manager) inMemory(id string) (run.Record, bool) {
	if a := m.find(id); a != nil {
		return a.run.Record(), true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.recovered[id]
	return rec, ok
}

// Get returns one run.
func (m *Manager) Get(id string) (run.Record, error) {
	if rec, ok := m.inMemory(id); ok {
		return rec, nil
	}
	return m.cfg.Store.Record(id)
}

// WriteRecord writes one run's record to w as JSON, as GET
// /api/v1/runs/{id} sends it: the run in memory as it stands, a saved one
// as its file holds it (see store.WriteRecord). Either way its memory is
// bounded, and the work stops when ctx is done.
func (m *Manager) WriteRecord(ctx context.Context, id string, w io.Writer) error {
	if rec, ok := m.inMemory(id); ok {
		if rec.Consumers == nil {
			rec.Consumers = []run.ConsumerRecord{} // the API's shape: a list, even before any are planned
		}
		return m.cfg.Store.EncodeJSON(ctx, rec, w)
	}
	return m.cfg.Store.WriteRecord(ctx, id, w)
}

func (m *Manager) find(id string) *active {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last != nil && m.last.run.Record().ID == id {
		return m.last
	}
	return nil
}

// Abort stops a run and waits (bounded) until its consumers and cgroup are
// gone. Aborting a finished run returns it unchanged.
func (m *Manager) Abort(id string) (run.Record, error) {
	a := m.find(id)
	if a == nil {
		if rec, ok := m.inMemory(id); ok {
			return rec, nil // ended, its record not saved yet
		}
		return m.cfg.Store.Record(id)
	}
	a.run.Abort("aborted by request")
	select {
	case <-a.run.Done():
	case <-time.After(abortWait):
	}
	return a.run.Record(), nil
}

// WriteSamples writes a run's samples.csv: the run in memory's table (the
// encoding it keeps, not a copy), a saved one's file a buffer at a time.
func (m *Manager) WriteSamples(ctx context.Context, id string, w io.Writer) error {
	if a := m.find(id); a != nil {
		_, err := w.Write(a.table.CSV())
		return err
	}
	return m.cfg.Store.Copy(ctx, id, store.SamplesFile, w)
}

// Status is what the run metrics show: the most recent run.
type Status struct {
	ID, Preset string
	Active     bool
	Progress   run.Progress
	Policy     run.PolicyState
	Outcomes   map[string]uint64
	// WriteErrors counts failed writes of run records and tables.
	WriteErrors uint64
}

// Status returns the most recent run's progress, and false before any run.
func (m *Manager) Status() (Status, bool) {
	m.mu.Lock()
	last, isActive := m.last, m.active != nil
	outcomes := maps.Clone(m.outcomes)
	m.mu.Unlock()
	werr := m.writeErrors.Load()
	if last == nil {
		return Status{Outcomes: outcomes, WriteErrors: werr}, false
	}
	rec := last.run.Record()
	return Status{ID: rec.ID, Preset: rec.Spec.Preset, Active: isActive, Progress: last.run.Progress(), Policy: last.run.PolicyState(), Outcomes: outcomes, WriteErrors: werr}, true
}
