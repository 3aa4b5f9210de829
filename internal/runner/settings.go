// The run's kernel memory settings (package settings): checked as the run
// is asked for, applied as its plan begins, restored as it ends; the
// journal in the data directory restores a run's host-wide changes at the
// next start after a kill.

package runner

import (
	"errors"
	"fmt"
	"slices"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/settings"
)

// recoverSettings restores what a predecessor that died mid-run left of
// the host's settings. A journal it cannot restore stays, and runs with
// host-wide settings are refused until it is dealt with.
func (e *Slot) recoverSettings() {
	dir := e.cfg.Store.Data()
	if dir == nil {
		return
	}
	changes, err := settings.Recover(dir, settings.Host{})
	if err != nil {
		e.cfg.Logger.Error("the host settings a run left could not all be restored", "dir", dir.Path(), "err", err)
		return
	}
	for _, c := range changes {
		if c.Swapon != "" {
			e.cfg.Logger.Warn("reset the zram device a run left as swap", "device", c.Swapon)
		} else {
			e.cfg.Logger.Warn("restored a host setting a run left changed", "file", c.File, "value", c.Before, "was", c.After)
		}
	}
}

// beginSettings checks a run's settings against the host and the
// operator's opt-in, and opens its journal; nil for a run with none.
func (e *Slot) beginSettings(id string, r run.Resolved) (*settings.Journal, error) {
	if len(r.Settings) == 0 {
		return nil, nil
	}
	v2 := e.cfg.Parent.V2
	if err := r.Settings.Check(e.cfg.AllowHostSettings, v2, ""); err != nil {
		return nil, &run.FieldError{Field: "settings", Msg: err.Error()}
	}
	dir := e.cfg.Store.Data()
	if dir == nil {
		return nil, errors.New("the data directory is open to read only: no journal for the run's settings")
	}
	j, err := settings.Begin(dir, settings.Host{}, id)
	if err != nil {
		return nil, &run.UnsafeError{Msg: err.Error()}
	}
	if len(r.Settings.HostWide(v2)) > 0 {
		if err := j.Lock(); err != nil {
			return nil, fmt.Errorf("%w: %s", run.ErrBusy, err.Error())
		}
	}
	return j, nil
}

// applySettings puts the run under its settings as its plan begins; the
// run fails, naming why, when the kernel does not take one.
func (r *execution) applySettings() {
	j := r.cfg.Journal
	if j == nil {
		return
	}
	rec, err := settings.Apply(j, r.cfg.Spec.Settings, settings.Target{
		Cgroup: r.cg.Path, V2: r.cg.V2, SwapBytes: r.cfg.Spec.Demand()})
	r.mu.Lock()
	r.rec.Settings = rec
	r.mu.Unlock()
	r.changes.Add(1)
	if err != nil {
		r.failNow("putting the run under its settings: " + err.Error())
		return
	}
	r.cfg.Logger.Info("run under its settings", "run", r.cfg.ID, "settings", rec.Asked.Label())
}

// restoreSettings gives the host its settings back once the run's
// processes are gone; a value that cannot be written back fails the run
// and stays journalled for the next start.
func (r *execution) restoreSettings() error {
	j := r.cfg.Journal
	if j == nil {
		return nil
	}
	r.mu.Lock()
	var rec *settings.Record
	if r.rec.Settings != nil {
		c := *r.rec.Settings // a copy: Record's readers share the old one
		c.Files = slices.Clone(c.Files)
		rec = &c
	}
	r.mu.Unlock()
	err := j.Finish(rec)
	r.mu.Lock()
	r.rec.Settings = rec
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("restoring the host's settings (kept in %s for the next start): %w", settings.JournalFile, err)
	}
	return nil
}
