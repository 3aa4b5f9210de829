package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/workload"
)

// tearDown stops what is left of the run and removes what it made, then
// ends its record.
func (r *execution) tearDown(allExited <-chan struct{}) {
	// The teardown at the host's speed: a consumer killed on a slow
	// device must not wait out its queue.
	r.unthrottle()
	// Nothing frozen or locked from here on: a frozen consumer would not
	// see its SIGTERM.
	r.levers.releaseAll()
	r.terminate(allExited)
	r.readKernel()
	r.readIO()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var destroyErr error
	if err := errors.Join(r.cg.Destroy(ctx), r.levers.destroy(), r.destroyIO(ctx)); err != nil {
		destroyErr = fmt.Errorf("removing the run cgroup: %w", err)
	}
	// Destroy killed what was inside; a consumer still waiting to join is
	// outside, and must not outlive the run either.
	r.kill()
	<-allExited
	// The consumers gone, a zram device taken off swap has nothing to
	// give back.
	if err := r.restoreSettings(); err != nil {
		destroyErr = errors.Join(destroyErr, err)
	}
	r.guard.Close()
	r.takeCycles()
	r.board.Close()
	r.finish(destroyErr)
}

// failNow ends the run at once as failed, with reason, unless it is
// already ending (then its own cause stands).
func (r *execution) failNow(reason string) {
	if r.ctx.Err() != nil {
		return
	}
	r.cfg.Logger.Error("the run failed; stopping it", "run", r.cfg.ID, "reason", reason)
	r.cancel(errors.New(reason))
}

// finish settles the run's final state; endErr is what went wrong ending
// it (removing its cgroup, restoring its settings).
func (r *execution) finish(endErr error) {
	now := r.cfg.Now()
	r.mu.Lock()
	r.rec.EndedAt = &now
	r.rec.OOMRescues = r.guard.Rescues()
	r.rec.OOMGuardCPUSeconds = r.guard.CPU().Seconds()
	cause := context.Cause(r.ctx)
	var ab abortError
	switch {
	case errors.As(cause, &ab):
		r.rec.State, r.rec.Reason = run.StateAborted, ab.reason
	case cause != nil:
		r.rec.State, r.rec.Reason = run.StateFailed, cause.Error()
	default:
		r.rec.State = run.StateCompleted
	}
	r.shape.finish(&r.rec)
	if endErr != nil {
		r.rec.Reason = joinReason(r.rec.Reason, endErr.Error())
		if r.rec.State == run.StateCompleted {
			r.rec.State = run.StateFailed
		}
	}
	state, reason := r.rec.State, r.rec.Reason
	r.mu.Unlock()
	r.cancel(nil)
	r.cfg.Logger.Info("run ended", "run", r.cfg.ID, "state", state, "reason", reason)
	r.changes.Add(1)
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// maxReasonLine bounds what of a consumer's error goes into a record.
const maxReasonLine = 256

// readKernel records what the run cgroup's own files say as it ends,
// before it is removed: its PSI over the run and its memory events.
func (r *execution) readKernel() {
	f := workload.Files{V2: r.cg.Path}
	if !r.cg.V2 {
		f = workload.Files{V1Memory: r.cg.Path}
		if g := r.levers.unifiedRoot; g != nil {
			f.V2 = g.Path
		}
	}
	k := workload.ReadKernel(f)
	if n, err := r.cg.OOMKills(); err == nil && len(k.Events) > 0 {
		k.Events["oom_kill"] = n // the consumers' groups' too (v1 counts a kill in the victim's own)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if k.HasPressure {
		r.rec.Pressure = &run.Pressure{SomeSeconds: k.Pressure.Some.Seconds(), FullSeconds: k.Pressure.Full.Seconds()}
	}
	if len(k.Events) > 0 {
		r.rec.MemoryEvents = k.Events
	}
}
