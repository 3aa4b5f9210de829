package runner

import (
	"context"
	"io"
	"maps"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// Service is the runner as the API's backend (start, the run list, a
// record, its samples, an abort) and the run metrics' source (Status).
type Service struct{ e *Slot }

// Start validates a spec against the host and starts it.
func (s *Service) Start(spec run.Spec) (run.Record, error) { return s.e.Start(spec) }

// List is a page of the runs, newest first (see store.Summaries): at most
// n, after the run id after. A run the runner holds in memory (the last
// one, active or not) is listed as it stands, the others as saved.
func (s *Service) List(ctx context.Context, after string, n int) ([]run.Summary, string, error) {
	page, next, err := s.e.cfg.Store.Summaries(ctx, after, n)
	for i := range page {
		if rec, ok := s.inMemory(page[i].ID); ok {
			page[i] = rec.Summary()
		}
	}
	return page, next, err
}

// inMemory is a run whose record the runner holds: the last one, active
// or ended (its final save may still be retried), or one a predecessor left
// whose marking as aborted has not been saved yet.
func (s *Service) inMemory(id string) (run.Record, bool) {
	if a := s.find(id); a != nil {
		return a.run.Record(), true
	}
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	rec, ok := s.e.recovered[id]
	return rec, ok
}

// Get returns one run.
func (s *Service) Get(id string) (run.Record, error) {
	if rec, ok := s.inMemory(id); ok {
		return rec, nil
	}
	return s.e.cfg.Store.Record(id)
}

// WriteRecord writes one run's record to w as JSON, as GET
// /api/v1/runs/{id} sends it: the run in memory as it stands, a saved one
// as its file holds it (see store.WriteRecord). Either way its memory is
// bounded, and the work stops when ctx is done.
func (s *Service) WriteRecord(ctx context.Context, id string, w io.Writer) error {
	if rec, ok := s.inMemory(id); ok {
		if rec.Consumers == nil {
			rec.Consumers = []run.ConsumerRecord{} // the API's shape: a list, even before any are planned
		}
		return s.e.cfg.Store.EncodeJSON(ctx, rec, w)
	}
	return s.e.cfg.Store.WriteRecord(ctx, id, w)
}

func (s *Service) find(id string) *active {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if s.e.last != nil && s.e.last.run.Record().ID == id {
		return s.e.last
	}
	return nil
}

// Abort stops a run and waits (bounded) until its consumers and cgroup are
// gone. Aborting a finished run returns it unchanged.
func (s *Service) Abort(id string) (run.Record, error) {
	a := s.find(id)
	if a == nil {
		if rec, ok := s.inMemory(id); ok {
			return rec, nil // ended, its record not saved yet
		}
		return s.e.cfg.Store.Record(id)
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
func (s *Service) WriteSamples(ctx context.Context, id string, w io.Writer) error {
	if a := s.find(id); a != nil {
		_, err := w.Write(a.table.CSV())
		return err
	}
	return s.e.cfg.Store.Copy(ctx, id, store.SamplesFile, w)
}

// Status is the run side's state for the metrics: the most recent run,
// the outcomes so far and every write cycle's duration.
func (s *Service) Status() run.Status {
	s.e.mu.Lock()
	last, isActive := s.e.last, s.e.active != nil
	st := run.Status{Outcomes: maps.Clone(s.e.outcomes), Cycles: s.e.cycles.Clone()}
	s.e.mu.Unlock()
	st.WriteErrors = s.e.writeErrors.Load()
	if last == nil {
		return st
	}
	rec := last.run.Record()
	st.Last, st.ID, st.Preset, st.Active = true, rec.ID, rec.Spec.Preset, isActive
	st.Progress, st.Policy, st.SwapDevice = last.run.Progress(), last.run.PolicyState(), rec.Spec.SwapDevice
	st.Cycles.Add(last.run.CycleDurations())
	if st.SwapDevice.Profile == "" {
		st.SwapDevice.Profile = swapdev.None
	}
	if e := rec.SwapEmulation; e != nil {
		st.SwapThrottled = e.Throttled
	}
	return st
}
