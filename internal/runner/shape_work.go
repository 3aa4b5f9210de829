package runner

import (
	"bufio"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/run"
)

// work carries out run.ShapeWork: one consumer runs its cycles alone
// first, then the others on the schedule from its end, each ending after
// its cycles; the run keeps each one's slowdown and the makespan.
type work struct{ scheduled }

func init() { strategies[run.ShapeWork] = work{} }

func (work) groups(n int) int { return n + 1 } // the one that runs alone first

func (work) beforePlan(r *execution) { r.alone() }

func (work) configure(r *execution, cc *consumer.Config) {
	cc.End = r.start.Add(run.MaxRunDuration) // work, not t_f, ends it
}

func (work) deadline(spec run.Resolved, start time.Time) (time.Time, error) {
	return boundedDeadline(spec, start)
}

// progress: the plan has its starts only, and a consumer is planned from
// its start (once the one alone is done) until it ends.
func (work) progress(p *run.Progress, spec run.Resolved, rec *run.Record, now time.Time, _ int) {
	p.Total, p.Planned = 0, 0
	if rec.Alone != nil && rec.Alone.Exit != "" {
		for _, c := range rec.Consumers {
			if !now.Before(c.PlannedStart) && c.ActualEnd == nil && c.Exit == "" {
				p.Planned++
			}
		}
	}
	p.DemandBytes = int64(p.Active) * spec.SizeBytes
}

// finish: an aborted or failed run did not do its work, so the time until
// it stopped is no makespan.
func (work) finish(rec *run.Record) {
	if rec.State == run.StateCompleted {
		rec.MakespanSeconds = makespan(rec.Consumers)
	}
}

// makespan is the time from the first consumer's start to the last one's
// end; 0 unless every consumer started and ended.
func makespan(cs []run.ConsumerRecord) float64 {
	var first, last time.Time
	for _, c := range cs {
		if c.ActualStart == nil || c.ActualEnd == nil {
			return 0
		}
		if first.IsZero() || c.ActualStart.Before(first) {
			first = *c.ActualStart
		}
		if c.ActualEnd.After(last) {
			last = *c.ActualEnd
		}
	}
	return last.Sub(first).Seconds()
}

// alone runs one consumer of the run's shape, with the run's cycles, alone
// in the run cgroup before the others start: its run time is what each
// consumer's slowdown divides by (TPF's slowdown against running alone).
// The plan then starts from its end. A run cancelled meanwhile stops it; a
// consumer that fails alone fails the run, as one of the run would.
func (r *execution) alone() {
	// consumer-NN after the run's own; its cycles go on its pipe.
	cc := r.consumerConfig(len(r.procs), r.cfg.Now(), r.start.Add(run.MaxRunDuration))
	cc.CycleLog = false
	cmd, repR, ctl, stderr, err := r.startConsumer(cc)
	if err != nil {
		r.cancel(fmt.Errorf("starting the consumer that runs alone first: %w", err))
		return
	}
	defer ctl.Close()
	a := &run.AloneRecord{PID: cmd.Process.Pid, ActualStart: cc.Start}
	r.mu.Lock()
	r.rec.Alone = a
	r.mu.Unlock()
	r.changes.Add(1)

	r.followAlone(cmd.Process, repR, a)
	err = cmd.Wait()
	r.mu.Lock()
	a.Exit = r.exitString(cmd.ProcessState, err)
	exit := a.Exit
	if r.ctx.Err() == nil && exit == "ok" {
		// The plan starts now: every consumer's times move with it.
		now := r.cfg.Now()
		r.start = now
		for i := range r.rec.Consumers {
			r.rec.Consumers[i].PlannedStart, r.rec.Consumers[i].PlannedEnd = r.shape.planned(r.cfg.Spec, i, now)
		}
	}
	r.mu.Unlock()
	r.changes.Add(1)
	if r.ctx.Err() == nil && exit != "ok" {
		reason := fmt.Sprintf("the consumer that runs alone first (pid %d) ended by %s", a.PID, exit)
		if last := stderr.Last(); last != "" {
			reason += ": " + last
		}
		r.failNow(reason)
	}
}

// followAlone records the messages of the consumer that runs alone until
// its pipe closes; a run cancelled meanwhile stops it, with SIGTERM, then
// SIGKILL after stopGrace.
func (r *execution) followAlone(proc *os.Process, repR *os.File, a *run.AloneRecord) {
	msgs := make(chan consumer.Message)
	go func() {
		defer close(msgs)
		defer repR.Close()
		rd := bufio.NewReader(repR)
		for {
			m, err := consumer.ReadMessage(rd)
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	cancelled := r.ctx.Done()
	var killAfter <-chan time.Time
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return
			}
			r.mu.Lock()
			switch m.Kind {
			case consumer.KindStarted:
				a.ActualStart = time.Unix(0, m.A)
			case consumer.KindDone:
				end := time.Unix(0, m.A)
				a.ActualEnd, a.Cycles = &end, uint64(m.B)
				if !m.Terminated() {
					a.RunSeconds = end.Sub(a.ActualStart).Seconds()
				}
			}
			r.mu.Unlock()
		case <-cancelled:
			_ = proc.Signal(syscall.SIGTERM) // it sends Done and exits
			_ = proc.Signal(syscall.SIGCONT)
			cancelled, killAfter = nil, time.After(stopGrace)
		case <-killAfter:
			_ = proc.Kill() // parked, or stuck: the run is over
			killAfter = nil
		}
	}
}
