// The run's kernel memory settings (package settings): checked as the run
// is asked for, applied as its plan begins, restored as it ends; the
// host's journal (settings.DefaultStateDir) restores a run's host-wide
// changes at the next start after a kill.

package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/settings"
)

// recoverSettings restores what a thrashscope process that died mid-run
// left of the host's settings, under the host's lock: a journal another
// live process holds is its own, and left to it. A journal that cannot be
// restored stays, named in the log, and runs with host-wide settings are
// refused until it is dealt with.
func (e *Slot) recoverSettings() {
	if dir := e.cfg.Store.Data(); dir != nil {
		if _, err := dir.ReadFile(settings.JournalFile, 1); !errors.Is(err, fs.ErrNotExist) {
			e.cfg.Logger.Error("a settings journal of an earlier thrashscope is in the data directory; thrashscope now keeps it in "+e.stateDir()+" and acts on none there: restore by hand the files it names, then remove it",
				"file", filepath.Join(dir.Path(), settings.JournalFile))
		}
	}
	if _, err := os.Stat(e.stateDir()); errors.Is(err, fs.ErrNotExist) || os.Geteuid() != 0 {
		return // no thrashscope process changed this host's settings since its boot; or only root could have
	}
	state, err := settings.OpenState(e.stateDir())
	if err != nil {
		e.cfg.Logger.Error("the host settings a run left cannot be checked", "err", err)
		return
	}
	defer state.Close()
	outs, err := settings.Recover(state, settings.Host{})
	e.logOutcomes(outs)
	switch {
	case errors.Is(err, settings.ErrBusy):
		e.cfg.Logger.Info("another thrashscope process holds the host's settings; its journal is its own", "dir", state.Path())
	case err != nil:
		e.cfg.Logger.Error("the host settings a run left could not all be restored", "err", err)
	}
}

// logOutcomes says what a restore of a dead run's journal did: each value
// it overwrote, and each it kept.
func (e *Slot) logOutcomes(outs []settings.Outcome) {
	for _, o := range outs {
		switch {
		case o.Swapon != "" && o.Action == "restored":
			e.cfg.Logger.Warn("reset the zram device a run left as swap", "device", o.Swapon)
		case o.Action == "restored":
			e.cfg.Logger.Warn("restored a host setting a run left changed", "file", o.File, "overwrote", o.Found, "with", o.Before)
		case o.Action == "kept":
			e.cfg.Logger.Warn("left a host setting a run had changed as someone since set it", "what", o.Change.String(), "found", o.Found, "run_wrote", o.After)
		}
	}
}

// stateDir is the host's settings state directory.
func (e *Slot) stateDir() string {
	if e.cfg.StateDir != "" {
		return e.cfg.StateDir
	}
	return settings.DefaultStateDir
}

// beginSettings checks a run's settings against the host and the
// operator's opt-in, and opens its journal: for host-wide settings, under
// the host's lock, having restored what a dead process left. nil for a run
// with none.
func (e *Slot) beginSettings(id string, r run.Resolved) (*settings.Journal, error) {
	if len(r.Settings) == 0 {
		return nil, nil
	}
	v2 := e.cfg.Parent.V2
	if err := r.Settings.Check(e.cfg.AllowHostSettings, v2, ""); err != nil {
		return nil, &run.FieldError{Field: "settings", Msg: err.Error()}
	}
	host := len(r.Settings.HostWide(v2)) > 0
	var state *settings.State
	if host {
		var err error
		if state, err = settings.OpenState(e.stateDir()); err != nil {
			return nil, &run.UnsafeError{Msg: err.Error()}
		}
	}
	j, outs, err := settings.Begin(state, settings.Host{}, id, host)
	e.logOutcomes(outs)
	switch {
	case errors.Is(err, settings.ErrBusy):
		state.Close()
		return nil, fmt.Errorf("%w: %s", run.ErrBusy, err.Error())
	case err != nil:
		state.Close()
		return nil, &run.UnsafeError{Msg: err.Error()}
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
	outs, err := j.Finish(rec)
	j.Close()
	r.mu.Lock()
	r.rec.Settings = rec
	r.mu.Unlock()
	for _, o := range outs {
		if o.Action == "kept" {
			r.cfg.Logger.Warn("left a host setting the run had changed as someone since set it", "run", r.cfg.ID, "what", o.Change.String(), "found", o.Found, "run_wrote", o.After)
		}
	}
	if err != nil {
		return fmt.Errorf("restoring the host's settings (what could not be stays in %s for the next thrashscope process): %w", settings.JournalFile, err)
	}
	return nil
}

// notStarted removes what a run that did not start left: its directory,
// and its settings' journal (nothing applied yet).
func (e *Slot) notStarted(id string, journal *settings.Journal) {
	_ = e.cfg.Store.Remove(id)
	_, _ = journal.Finish(nil)
	journal.Close()
}
