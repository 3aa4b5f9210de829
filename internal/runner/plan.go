package runner

import (
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
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/kernfile"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/settings"
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
	// shape carries out the run's shape; traits are what it means to the
	// record.
	shape  strategy
	traits run.Traits
	cg     *cgroup.Cgroup
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
	shape := strategyOf(cfg.Spec)
	joins, gov, err := consumerLevers(cfg, cg, ioGroup, shape.groups(n), n)
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
	r := &execution{cfg: cfg, shape: shape, traits: cfg.Spec.Traits(), cg: cg, io: ioGroup, guard: guard, joins: joins, start: start, done: make(chan struct{}), oomBefore: oom, levers: gov}
	r.ctx, r.cancel = context.WithCancelCause(context.Background())
	r.rec = plannedRecord(cfg, shape, start, cg.Path, gov.protection)
	r.rec.SwapEmulation = emulation
	r.procs = make([]*os.Process, n)
	shape.collect(r)
	go r.drive()
	return r, nil
}

// consumerLevers makes the consumers' sub-cgroups, so a policy's lever
// acts on one consumer while the run's limit covers them all, and the
// levers over the n processes; on failure it removes what the run made so
// far.
func consumerLevers(cfg execConfig, cg, ioGroup *cgroup.Cgroup, groups, n int) ([]*os.File, *levers, error) {
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
func plannedRecord(cfg execConfig, shape strategy, start time.Time, cgroupPath, protection string) run.Record {
	rec := newRecord(cfg.ID, cfg.Spec, start)
	rec.State, rec.Cgroup, rec.Protection = run.StateRunning, cgroupPath, protection
	for i := range cfg.Spec.Processes() {
		c := run.ConsumerRecord{Index: i}
		c.PlannedStart, c.PlannedEnd = shape.planned(cfg.Spec, i, start)
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
	p := progressAt(r.shape, r.cfg.Spec, &r.rec, r.start, now, r.cycles.chunksDone())
	p.SlowestCycle = r.cycles.slowestCycle(now)
	return p
}

// progressAt is a run's progress at now from its record: the plan's
// consumers and the started, active and ended ones, each one's cycles and
// lateness, and the demand. It reads nothing else.
func progressAt(shape strategy, spec run.Resolved, rec *run.Record, start, now time.Time, chunksDone int) run.Progress {
	p := run.Progress{Elapsed: now.Sub(start), LimitBytes: spec.MemoryLimitBytes}
	for _, c := range rec.Consumers {
		if c.ActualStart != nil {
			p.Started++
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
	shape.progress(&p, spec, rec, now, chunksDone)
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
		r.shape.beforePlan(r)
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
	deadline, overran := r.shape.deadline(r.cfg.Spec, r.start)
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
			r.cfg.Logger.Warn("consumers overran the run's end; terminating them", "run", r.cfg.ID, "why", overran)
			r.cancel(overran)
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
