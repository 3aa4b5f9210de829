package runner

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// save writes the record, and the tables when withTables (or when enough
// rows have gathered); the record last, so one that says a run ended finds
// its final tables beside it. Saves of one run are serialised. It returns
// the first failure.
func (e *Slot) save(a *active, withTables bool) error {
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
// to retryLast; once the runner is closing, it tries once more and gives
// up, saying what was lost.
func (e *Slot) retry(what string, try func() bool) {
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
func (e *Slot) writeFailed(what, id string, err error) {
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
func (e *Slot) saveInBackground(a *active, withTables bool) {
	go func() { _ = e.save(a, withTables) }()
}

// recover settles records left active by a dead observer and sweeps its
// run cgroups.
func (e *Slot) recover() error {
	var errs []error
	for _, id := range e.leftActive() {
		if err := e.markAborted(id); err != nil {
			errs = append(errs, err)
		}
	}
	if len(e.recovered) > 0 {
		go e.retry("saving the records of runs a previous observer left", e.saveRecovered)
	}
	if e.cfg.ParentErr == nil {
		errs = append(errs, e.sweep())
	}
	return errors.Join(errs...)
}

// leftActive lists the runs whose records say they are still active: a
// summary a record, so a data dir of large records is not all held at
// once.
func (e *Slot) leftActive() []string {
	var active []string
	for after := ""; ; {
		page, next, err := e.cfg.Store.Summaries(context.Background(), after, store.MaxPageSize)
		if err != nil {
			e.cfg.Logger.Warn("reading run records", "err", err)
		}
		for _, sum := range page {
			if run.Active(sum.State) {
				active = append(active, sum.ID)
			}
		}
		if after = next; next == "" {
			return active
		}
	}
}

// markAborted marks a run a previous observer left aborted and saves it;
// a record that cannot be saved now is kept in e.recovered, and the error
// returned.
func (e *Slot) markAborted(id string) error {
	rec, err := e.cfg.Store.LoadRecord(id)
	if err != nil {
		e.cfg.Logger.Warn("reading a run record left active", "run", id, "err", err)
		return nil
	}
	// A record is data, not an order: only a cgroup directly under this
	// observer's --cgroup.parent, with a run's name, and held by no live
	// process is destroyed (by the sweep), whatever path the record names.
	if rec.Cgroup != "" && (e.cfg.ParentErr != nil || filepath.Dir(filepath.Clean(rec.Cgroup)) != filepath.Clean(e.cfg.Parent.Path) ||
		!strings.HasPrefix(filepath.Base(rec.Cgroup), cgroup.Prefix+"run-")) {
		e.cfg.Logger.Warn("a run record names a cgroup outside --cgroup.parent; left alone", "run", rec.ID, "cgroup", strictjson.Clip(rec.Cgroup), "parent", e.cfg.Parent.Path)
	}
	now := time.Now()
	rec.State, rec.EndedAt = run.StateAborted, &now
	rec.Reason = "the observer stopped mid-run (crash or kill); its consumers and cgroup were removed when it restarted"
	for i := range rec.Consumers {
		if rec.Consumers[i].PID != 0 && rec.Consumers[i].Exit == "" {
			rec.Consumers[i].Exit = "killed"
		}
	}
	err = e.cfg.Store.SaveRecord(rec)
	if err != nil {
		e.recovered[rec.ID] = rec
	}
	e.cfg.Logger.Warn("marked a run left by a previous observer aborted", "run", rec.ID, "cgroup", rec.Cgroup)
	return err
}

// saveRecovered tries to save each recovered record not saved yet, and
// reports whether none is left.
func (e *Slot) saveRecovered() bool {
	e.mu.Lock()
	recs := maps.Clone(e.recovered)
	e.mu.Unlock()
	for id, rec := range recs {
		if e.cfg.Store.SaveRecord(rec) == nil {
			e.mu.Lock()
			delete(e.recovered, id)
			e.mu.Unlock()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.recovered) == 0
}

// sweep removes the run cgroups dead observers left under --cgroup.parent.
// Where memory is on cgroup v1, a run had a group in the unified hierarchy
// too (its consumers' PSI and workload, and the freezer): its consumers
// died with the process that ran them (a frozen task dies of SIGKILL), and the group is
// left, empty; so is its group in the v1 blkio hierarchy, if it had one.
func (e *Slot) sweep() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var errs []error
	swept, err := e.cfg.Parent.Sweep(ctx, "run-")
	for _, p := range swept {
		e.cfg.Logger.Warn("removed a stale run cgroup", "cgroup", p)
	}
	errs = append(errs, err)
	if !e.cfg.Parent.V2 {
		if unified, err := cgroup.OwnUnified("/proc"); err == nil {
			swept, err := unified.Sweep(ctx, "run-")
			for _, p := range swept {
				e.cfg.Logger.Warn("removed a stale run group in the unified hierarchy", "cgroup", p)
			}
			errs = append(errs, err)
		}
		// And, for a run that emulated a swap device, a group in the v1
		// blkio hierarchy, as empty.
		if blkio, err := cgroup.OwnBlkio("/proc"); err == nil {
			swept, err := blkio.Sweep(ctx, "run-")
			for _, p := range swept {
				e.cfg.Logger.Warn("removed a stale run group in the blkio hierarchy", "cgroup", p)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
