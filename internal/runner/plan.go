package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/kernfile"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/settings"
	"github.com/thrashscope/thrashscope/internal/workload"
)

// spawnLead is how long before its planned start a consumer process is
// started. It waits idle outside the run cgroup and joins it at its start,
// so neither a slow fork and exec nor the thrash it is about to join (which
// would reclaim a waiting consumer's pages) delays the plan.
const spawnLead = 2 * time.Second

// cgroupCheckEvery is how often a run checks that its cgroup still exists.
const cgroupCheckEvery = time.Second

// pauseAfter is how late a check may come before the process running the
// run counts as paused (stopped, or starved of CPU) meanwhile.
const pauseAfter = 2 * time.Second

// stopGrace is how long consumers get to exit on SIGTERM before the cgroup
// is destroyed with SIGKILL.
const stopGrace = 2 * time.Second

// execConfig configures one run.
type execConfig struct {
	ID   string
	Spec run.Resolved
	// Binary is the loadgen executable that consumers run as.
	Binary string
	// Parent is where the run cgroup goes.
	Parent cgroup.Parent
	// FileDir holds backing=file regions, unlinked as soon as they open.
	FileDir string
	Logger  *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Unified is where a run's group in the unified hierarchy goes when
	// the memory controller is on cgroup v1 (its consumers' PSI and
	// workload, and the freezer); nil finds this process's own group
	// there.
	Unified *cgroup.Parent
	// Pairs learns, where memory is on v1, each of the run's groups in the
	// unified hierarchy with its memory group, for the workloads' memory
	// readings; nil tells no one.
	Pairs *cgroup.Pairs
	// ProcFS reads the consumers' /proc stat, to see that each makes
	// progress; the zero FS is /proc.
	ProcFS procfs.FS
	// Journal holds the run's kernel settings' changes; nil for a run
	// with none.
	Journal *settings.Journal
}

// execution is one run in progress: its cgroup, its consumers and its record.
type execution struct {
	cfg execConfig
	cg  *cgroup.Cgroup
	// io is the run's group in the v1 blkio hierarchy that its consumers
	// join, for an emulated swap device where memory is on cgroup v1; nil
	// otherwise (on v2 the run cgroup carries the throttle).
	io *cgroup.Cgroup
	// joins are each consumer's sub-cgroup's cgroup.procs, open for it to
	// join through (the last one is the consumer that runs alone first);
	// closed once it started, or when the run ends.
	joins []*os.File
	start time.Time

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	// changes counts the record's changes (a consumer started or ended,
	// the state moved), for whoever saves it.
	changes atomic.Uint64

	mu        sync.Mutex
	rec       run.Record
	durations run.CycleHistogram // every write cycle's duration
	procs     []*os.Process      // by index; nil until spawned
	cycles    cycleStats
	oomBefore uint64
	board     *consumer.CycleBoard // nil: cycles come on the message pipes
	guard     *cgroup.OOMGuard     // nil when it could not be set up
	levers    *levers              // the run's policy and its levers
	// progress is each live consumer's, by index (-1 the one alone), and
	// statFiles their /proc stat files, kept open between checks;
	// drive's goroutine alone uses them.
	progress  map[int]*progress
	statFiles kernfile.Set
}

// abortError is the cancel cause of an abort; its text is the reason.
type abortError struct{ reason string }

func (e abortError) Error() string { return e.reason }

// execute creates the run cgroup and starts the run in the background.
// The record is pending until the cgroup exists, running from then on.
func execute(cfg execConfig) (*execution, error) {
	if err := cfg.fillDefaults(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(cfg.Binary); err != nil {
		return nil, &run.UnsafeError{Msg: fmt.Sprintf("the consumer binary %q is missing: run make build, or install loadgen beside observer", cfg.Binary)}
	}
	cg, err := cfg.Parent.Create("run-"+cfg.ID, cgroup.Limits{
		MemoryBytes: cfg.Spec.MemoryLimitBytes,
		NoSwap:      cfg.Spec.Backing == run.BackingFile, // a page-cache thrash, with or without swap
	})
	if err != nil {
		return nil, &run.UnsafeError{Msg: "cannot make the run cgroup: " + err.Error()}
	}
	emulation, ioGroup, err := emulateSwap(cfg, cg)
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return nil, &run.UnsafeError{Msg: errors.Join(fmt.Errorf("cannot emulate swap device %s here: %w", cfg.Spec.SwapDevice, err), cg.Destroy(ctx)).Error()}
	}
	n := cfg.Spec.Processes()
	joins, gov, err := consumerLevers(cfg, cg, ioGroup, n)
	if err != nil {
		return nil, err
	}
	oom, _ := cg.OOMKills()
	// A thrash this deep makes memcg reclaim give up with swap still free;
	// the guard reclaims instead of letting the OOM killer take a consumer
	// (v1), or keeps charges from reaching the limit (v2; see
	// cgroup.OOMGuard). Without it, the run goes on and records what the
	// killer takes.
	guard, err := cg.GuardOOM(cfg.Spec.MemoryLimitBytes)
	switch {
	case err != nil:
		cfg.Logger.Warn("no OOM guard: the kernel may OOM-kill consumers with swap still free", "run", cfg.ID, "err", err)
	case !guard.Reclaims():
		cfg.Logger.Warn("the OOM guard only throttles here: the kernel has no memory.reclaim (Linux 5.19+)", "run", cfg.ID)
	}
	start := cfg.Now()
	r := &execution{cfg: cfg, cg: cg, io: ioGroup, guard: guard, joins: joins, start: start, done: make(chan struct{}), oomBefore: oom, levers: gov}
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	r.rec = plannedRecord(cfg, start, cg.Path, gov.protection)
	r.rec.SwapEmulation = emulation
	r.procs = make([]*os.Process, n)
	if cfg.Spec.Shape() == run.ShapeFill {
		r.cycles.chunks = make([][]chunkSample, cfg.Spec.Consumers)
	} else if r.board, err = consumer.NewCycleBoard(n); err != nil {
		cfg.Logger.Warn("no cycle board; each write cycle is sent on its consumer's pipe", "run", cfg.ID, "err", err)
		r.board = nil
	}
	go r.drive()
	return r, nil
}

// consumerLevers makes each consumer's sub-cgroup, so a policy's lever acts
// on one consumer while the run's limit covers them all, and the levers
// over them; on failure it removes what the run made so far.
func consumerLevers(cfg execConfig, cg, ioGroup *cgroup.Cgroup, n int) ([]*os.File, *levers, error) {
	groups := n
	if cfg.Spec.Shape() == run.ShapeWork {
		groups++ // the one that runs alone first
	}
	joins, children, err := consumerGroups(cg, groups)
	var gov *levers
	if err == nil {
		gov, err = newLevers(cfg, children, n)
	}
	if err == nil {
		return joins, gov, nil
	}
	for _, f := range joins {
		f.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ioErr error
	if ioGroup != nil {
		ioErr = ioGroup.Destroy(ctx)
	}
	return nil, nil, &run.UnsafeError{Msg: errors.Join(err, cg.Destroy(ctx), ioErr).Error()}
}

// fillDefaults gives the optional fields of a execConfig their defaults.
func (cfg *execConfig) fillDefaults() error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ProcFS == (procfs.FS{}) {
		fs, err := procfs.NewFS("/proc")
		if err != nil {
			return err
		}
		cfg.ProcFS = fs
	}
	return nil
}

// newRecord is a run's record as it is first saved, before anything of it
// exists: pending. Every record of a run starts here.
func newRecord(id string, spec run.Resolved, at time.Time) run.Record {
	return run.Record{ID: id, Spec: spec, State: run.StatePending, StartedAt: at}
}

// plannedRecord is a run's record as it starts: running, each consumer
// with its planned start and end (the fill's consumers run from the start
// until they are done).
func plannedRecord(cfg execConfig, start time.Time, cgroupPath, protection string) run.Record {
	rec := newRecord(cfg.ID, cfg.Spec, start)
	rec.State, rec.Cgroup, rec.Protection = run.StateRunning, cgroupPath, protection
	for i := range cfg.Spec.Processes() {
		s := cfg.Spec.Slot(i)
		c := run.ConsumerRecord{Index: i, PlannedStart: start.Add(s.Start), PlannedEnd: start.Add(s.End)}
		if cfg.Spec.Shape() == run.ShapeFill {
			c.PlannedStart, c.PlannedEnd = start, start.Add(run.MaxRunDuration)
		}
		rec.Consumers = append(rec.Consumers, c)
	}
	return rec
}

// Record returns a copy of the run record as it stands.
func (r *execution) Record() run.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.rec
	rec.Consumers = append([]run.ConsumerRecord(nil), r.rec.Consumers...)
	rec.Transitions = append([]run.Transition(nil), r.rec.Transitions...)
	// Decisions are only ever appended, and an entry never changes: the
	// copy shares them (capped, so an append to it reallocates), and the
	// thousands of a policy that decides at every switch are not copied at
	// every tick and scrape.
	rec.Decisions = r.rec.Decisions[:len(r.rec.Decisions):len(r.rec.Decisions)]
	if r.rec.Alone != nil {
		a := *r.rec.Alone
		rec.Alone = &a
	}
	return rec
}

// AddTransition records a detector state change in the run record.
func (r *execution) AddTransition(tr run.Transition) {
	r.mu.Lock()
	r.rec.Transitions = append(r.rec.Transitions, tr)
	r.mu.Unlock()
	r.changes.Add(1)
}

// paused records that the process running the run was not scheduled from
// at for d: the run's record says so, and a consumer late meanwhile is not
// blamed on the host.
func (r *execution) paused(at time.Time, d time.Duration) {
	r.cfg.Logger.Warn("this process was not scheduled for seconds while it ran the run (stopped, or starved of CPU): the run's timing did not hold then", "run", r.cfg.ID, "from", at, "for", d)
	r.mu.Lock()
	r.rec.Pauses = append(r.rec.Pauses, run.Pause{At: at, Seconds: d.Seconds()})
	if len(r.rec.Pauses) > run.MaxPauses {
		shortest := 0
		for i, p := range r.rec.Pauses {
			if p.Seconds < r.rec.Pauses[shortest].Seconds {
				shortest = i
			}
		}
		r.rec.Pauses = slices.Delete(r.rec.Pauses, shortest, shortest+1)
	}
	r.mu.Unlock()
	r.changes.Add(1)
}

// Abort stops the run: consumers get SIGTERM, then the cgroup is destroyed.
// It returns at once; Done closes when everything is gone.
func (r *execution) Abort(reason string) { r.cancel(abortError{reason}) }

// Done is closed when the run has ended and its cgroup is gone.
func (r *execution) Done() <-chan struct{} { return r.done }

// Cgroup is the run cgroup.
func (r *execution) Cgroup() *cgroup.Cgroup { return r.cg }

// MemoryUsage is the run cgroup's memory usage.
func (r *execution) MemoryUsage() (int64, error) { return r.cg.MemoryUsage() }

// PIDs are the live consumers' pids.
func (r *execution) PIDs() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var pids []int
	for i, c := range r.rec.Consumers {
		if c.PID != 0 && c.Exit == "" && r.procs[i] != nil {
			pids = append(pids, c.PID)
		}
	}
	return pids
}

// Progress reports the run's live state.
func (r *execution) Progress() run.Progress {
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	p := progressAt(r.cfg.Spec, &r.rec, r.start, now, r.cycles.chunksDone())
	p.SlowestCycle = r.cycles.slowestCycle(now)
	return p
}

// progressAt is a run's progress at now from its record: the plan's
// consumers and the started, active and ended ones, each one's cycles and
// lateness, and the demand. It reads nothing else.
func progressAt(spec run.Resolved, rec *run.Record, start, now time.Time, chunksDone int) run.Progress {
	p := run.Progress{
		Elapsed:    now.Sub(start),
		Total:      spec.Duration(), // the plan; a run of fixed work has none (below)
		Planned:    spec.ActiveAt(now.Sub(start)),
		LimitBytes: spec.MemoryLimitBytes,
	}
	work := spec.Shape() == run.ShapeWork
	if work {
		// Its consumers end when their work is done: the plan has its
		// starts only, and a consumer is planned from its start to its end.
		p.Total, p.Planned = 0, 0
	}
	for _, c := range rec.Consumers {
		if c.ActualStart != nil {
			p.Started++
		}
		if work && rec.Alone != nil && rec.Alone.Exit != "" && !now.Before(c.PlannedStart) && c.ActualEnd == nil && c.Exit == "" {
			p.Planned++
		}
		if c.Exit != "" || c.ActualEnd != nil {
			p.Ended++
		} else if c.ActualStart != nil {
			p.Active++
		}
		p.Cycles = append(p.Cycles, c.Cycles)
		late := c.LatenessSeconds
		if c.ActualEnd == nil && c.Exit == "" && c.ActualStart != nil && now.After(c.PlannedEnd) {
			late = now.Sub(c.PlannedEnd).Seconds()
		}
		p.LatenessSeconds = append(p.LatenessSeconds, late)
	}
	if spec.Shape() == run.ShapeFill {
		p.ChunksDone = chunksDone
		p.Planned = min(p.Active, 1)
		p.DemandBytes = int64(p.ChunksDone%max(spec.Consumers, 1)) * spec.SizeBytes
	} else {
		p.DemandBytes = int64(p.Active) * spec.SizeBytes
	}
	return p
}

// drive runs the plan: spawn each consumer on time, wait for all of them
// to finish or for an abort, then tear the cgroup down.
func (r *execution) drive() {
	defer close(r.done)
	r.applySettings()
	var wg sync.WaitGroup
	spawned := make(chan struct{})
	// One goroutine on one locked OS thread spawns every consumer: their
	// PDEATHSIG fires when the spawning thread exits, so that thread must
	// live exactly as long as the run.
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if r.cfg.Spec.Shape() == run.ShapeWork {
			r.alone()
		}
		r.levers.start() // the plan starts: the policy may act
		r.spawnAll(&wg)
		for _, f := range r.joins {
			f.Close() // every consumer that will join holds its own copy
		}
		close(spawned)
		wg.Wait() // keep the thread while any consumer lives
	}()

	allExited := make(chan struct{})
	go func() { <-spawned; wg.Wait(); close(allExited) }()
	r.follow(allExited)
	r.statFiles.Close()
	<-spawned // at once when cancelled: no consumer starts after this
	r.tearDown(allExited)
}

// follow waits until every consumer exited, the run is cancelled, or it
// passes its deadline, checking its cgroup and its consumers' progress
// meanwhile.
func (r *execution) follow(allExited <-chan struct{}) {
	timed := r.cfg.Spec.Shape() == run.ShapeTimed
	deadline := r.start.Add(r.cfg.Spec.Deadline())
	grace := r.cfg.Spec.Grace()
	if timed {
		deadline = deadline.Add(grace) // the last cycles past t_f
	}
	overrun := time.NewTimer(time.Until(deadline))
	defer overrun.Stop()
	// The cgroup can be removed under an idle run (between consumers) by
	// another process; the next consumer would fail to join it.
	check := time.NewTicker(cgroupCheckEvery)
	defer check.Stop()
	last := time.Now()
	for {
		select {
		case <-allExited:
			return
		case <-r.ctx.Done():
			return
		case <-overrun.C:
			if !timed {
				r.cfg.Logger.Warn("consumers still at their work at the run's time bound; terminating them", "run", r.cfg.ID, "bound", run.MaxRunDuration)
				r.cancel(errors.New("consumers still running at the run's time bound, " + run.MaxRunDuration.String() + "; ask for fewer cycles"))
				return
			}
			r.cfg.Logger.Warn("consumers overran their finish time; terminating them", "run", r.cfg.ID, "grace", grace)
			r.cancel(errors.New("consumers still running " + grace.String() + " after the plan ended"))
			return
		case now := <-check.C:
			if gap := time.Since(last); gap > cgroupCheckEvery+pauseAfter {
				r.paused(last, gap-cgroupCheckEvery)
			}
			last = time.Now()
			r.takeCycles()
			r.cfg.Journal.Sample()
			if _, err := os.Stat(r.cg.Path); errors.Is(err, fs.ErrNotExist) {
				r.failNow("the run cgroup " + r.cg.Path + " was removed by a process outside the run")
			}
			r.watchProgress(now)
		}
	}
}

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
			s := r.cfg.Spec.Slot(i)
			r.rec.Consumers[i].PlannedStart, r.rec.Consumers[i].PlannedEnd = now.Add(s.Start), now.Add(s.End)
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
	if r.cfg.Spec.Shape() == run.ShapeWork && r.rec.State == run.StateCompleted {
		// An aborted or failed run did not do its work: the time until it
		// stopped is no makespan.
		r.rec.MakespanSeconds = makespan(r.rec.Consumers)
	}
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
