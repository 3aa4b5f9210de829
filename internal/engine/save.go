package engine

import (
	"cmp"
	"errors"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/internal/store"
)

// save writes the record, and the tables when withTables (or when enough
// rows have gathered); the record last, so one that says a run ended finds
// its final tables beside it. Saves of one run are serialised. It returns
// the first failure.
func (e *Engine) save(a *active, withTables bool) error {
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	if a.run == nil {
		return nil // StartRun failed
	}
	rec := a.run.Record()
	var first error
	failed := func(what string, err error) {
		if err != nil {
			e.writeFailed(what, rec.ID, err)
			first = cmp.Or(first, err)
		}
	}
	if withTables {
		failed("saving the samples", e.cfg.Store.WriteFile(rec.ID, store.SamplesFile, a.table.CSV()))
		failed("saving the per-process table", e.cfg.Store.WriteFile(rec.ID, store.ProcessesFile, a.processes.CSV()))
		if fill := a.run.FillRows(); fill != nil {
			failed("saving the fill table", e.cfg.Store.WriteFile(rec.ID, store.FillFile, store.FillCSV(fill)))
		}
	}
	failed("saving the run record", e.cfg.Store.SaveRecord(rec))
	return first
}

// Backoff of a save retried: from the first to the last wait, doubling.
const (
	retryFirst = time.Second
	retryLast  = 30 * time.Second
)

// retry calls try until it reports done, waiting longer between tries, up
// to retryLast; once the engine is closing, it tries once more and gives
// up, saying what was lost.
func (e *Engine) retry(what string, try func() bool) {
	wait := retryFirst
	for {
		select {
		case <-time.After(wait):
		case <-e.closing:
			if !try() {
				e.cfg.Logger.Error(what+" failed until the observer stopped; a restart marks the run aborted", "data_dir", e.cfg.Store.Path())
			}
			return
		}
		if try() {
			e.cfg.Logger.Info(what + ": saved, after failing")
			return
		}
		wait = min(2*wait, retryLast)
	}
}

// writeFailed logs and counts a failed write to the data directory. A run
// whose later writes fail goes on (its last good files stay in place, each
// whole); the count shows an operator that the disk needs rooe.
func (e *Engine) writeFailed(what, id string, err error) {
	e.writeErrors.Add(1)
	e.cfg.Logger.Error(what, "run", id, "err", err)
}

// errnoText is the system error inside err ("no space left on device"),
// without the paths around it; or err's text when there is none.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// saveInBackground saves a run off the caller's goroutine (the pipeline's);
// failures are logged and counted.
func (e *Engine) saveInBackground(a *active, withTables bool) {
	go func() { _ = e.save(a, withTables) }()
}
