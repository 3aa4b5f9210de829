package engine

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// recover settles records left active by a dead observer and sweeps its
// run cgroups.
func (e *Engine) recover() error {
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
func (e *Engine) leftActive() []string {
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
func (e *Engine) markAborted(id string) error {
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
func (e *Engine) saveRecovered() bool {
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
// died with their master (a frozen task dies of SIGKILL), and the group is
// left, empty; so is its group in the v1 blkio hierarchy, if it had one.
func (e *Engine) sweep() error {
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
