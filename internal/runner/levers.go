package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/run"
)

// A run's policy acts on its own consumers only, each through what the
// run made for it: its cgroup v2 group (freeze, thaw; protection with
// memory.min where memory is on v2), its control pipe (lock, unlock: on v1
// the consumer locks its own region) and a pidfd taken before the run
// could reap it (page-out with process_madvise), so no lever can reach a
// pid the kernel gave to another process since.

// Protection levers, as the record names them.
const (
	// ProtectMemoryMin: the consumer's memory cgroup's memory.min, the
	// kernel's own protection from reclaim (cgroup v2).
	ProtectMemoryMin = "memory.min"
	// ProtectMlock: the consumer locks its region (mlock2 MLOCK_ONFAULT),
	// on either hierarchy.
	ProtectMlock = "mlock"
)

// protectSlack is what memory.min protects beyond the consumer's region:
// its runtime's pages and its page tables, charged to its cgroup too, so
// that reclaim takes none of the region.
const protectSlack = 8 << 20

// lever is what a policy acts through on one consumer.
type lever struct {
	group *cgroup.Cgroup // its cgroup v2 group; nil without a freezer
	// unified is its group in the unified hierarchy where memory is on
	// v1 (the same as group under a policy that freezes): its PSI, and the
	// cgroup the probes count it in. Nil on v2, where its memory group is
	// its cgroup2 group.
	unified *cgroup.Cgroup
	// mem is its memory cgroup, where memory is on v2 (memory.min); nil
	// on v1.
	mem    *cgroup.Cgroup
	ctl    io.Writer  // its control pipe; nil before it started and after it exited
	pidfd  int        // -1 when none
	region [2]uintptr // address and length, once mapped
	frozen bool
	// done: the consumer said its work is over. It exits next, and a
	// freeze now would hold it short of its exit, and the run with it.
	done bool
	// protected: a lock was asked for (the consumer answers, and logs a
	// refusal).
	protected bool
}

// levers are a run's policy and what it acts through, one lever per
// consumer: the policy decides (its Step, on the Governor stage's tick) and
// the levers act (freeze, thaw, protect, release), knowing nothing of the
// run's processes or record but what the plan hands them. Its own mu guards the levers, so its tests need neither a run
// nor root.
type levers struct {
	name string
	pol  policy.Policy
	// runID, spec and logger are the run's, for the protection's bounds
	// and the log.
	runID  string
	spec   run.Resolved
	logger *slog.Logger
	// unifiedRoot is the run's group in the unified hierarchy, made where
	// the memory controller is on cgroup v1; nil otherwise.
	unifiedRoot *cgroup.Cgroup
	pairs       *cgroup.Pairs // told each unified group's memory group
	// alone is the unified group of the consumer that runs alone first
	// (a run of fixed work), which has no lever; nil otherwise.
	alone *cgroup.Cgroup

	// protection is the lever a protection pulls, ProtectMemoryMin or
	// ProtectMlock; "" for a policy that protects none.
	protection string

	stepMu sync.Mutex // one Govern at a time, and none after closing
	closed bool

	mu      sync.Mutex // guards what follows
	set     []lever
	on      bool // the plan runs: not before the consumer alone ends
	counts  map[policy.Kind]uint64
	pageout sync.WaitGroup
}

// newLevers makes the policy and, for those that freeze, each
// consumer's cgroup v2 group: the memory sub-cgroups themselves on cgroup
// v2, else children of a group made in the unified hierarchy.
func newLevers(cfg execConfig, memGroups []*cgroup.Cgroup, n int) (*levers, error) {
	pol, err := policy.New(cfg.Spec.Policy)
	if err != nil {
		return nil, err
	}
	g := &levers{name: cfg.Spec.Policy, pol: pol, runID: cfg.ID, spec: cfg.Spec, logger: cfg.Logger,
		set: make([]lever, n), counts: map[policy.Kind]uint64{}}
	if g.name == "" {
		g.name = policy.None
	}
	for i := range g.set {
		g.set[i].pidfd = -1
		if cfg.Parent.V2 {
			g.set[i].mem = memGroups[i]
		}
	}
	if policy.NeedsOf(g.name).Protection {
		// The kernel's own protection where the consumers' groups have
		// the memory controller (v2), else each consumer's mlock.
		g.protection = ProtectMlock
		if cfg.Parent.V2 && n > 0 {
			if _, err := os.Stat(filepath.Join(memGroups[0].Path, "memory.min")); err == nil {
				g.protection = ProtectMemoryMin
			}
		}
	}
	if cfg.Parent.V2 {
		if policy.NeedsOf(g.name).Freezer {
			for i := range n {
				g.set[i].group = memGroups[i]
			}
		}
		return g, nil
	}
	if err := g.unifiedGroups(cfg, memGroups, n); err != nil {
		return nil, err
	}
	return g, nil
}

// unifiedGroups gives each consumer its group in the unified hierarchy where
// memory is on v1: one child a consumer of a group of the run's, for the
// consumers' PSI and the cgroup the probes count them in (the run's
// workload), and, under a policy that freezes, for the cgroup v2 freezer.
func (g *levers) unifiedGroups(cfg execConfig, memGroups []*cgroup.Cgroup, n int) error {
	root, err := unifiedRunGroup(cfg, policy.NeedsOf(g.name).Freezer)
	if err != nil {
		if policy.NeedsOf(g.name).Freezer {
			return fmt.Errorf("policy %s freezes consumers through the cgroup v2 freezer: %w", g.name, err)
		}
		cfg.Logger.Warn("no group in the unified hierarchy for the run: its consumers' stall and workload are counted where the observer runs", "run", cfg.ID, "err", err)
		return nil
	}
	g.unifiedRoot, g.pairs = root, cfg.Pairs
	if len(memGroups) > 0 {
		g.pairs.Pair(root.Path, filepath.Dir(memGroups[0].Path))
	}
	for i := range n {
		ch, err := root.Child(run.ConsumerName(i))
		if err != nil {
			return errors.Join(err, g.destroy())
		}
		g.set[i].unified = ch
		g.pairs.Pair(ch.Path, memGroups[i].Path)
		if policy.NeedsOf(g.name).Freezer {
			g.set[i].group = ch
		}
	}
	if len(memGroups) > n { // the consumer alone: counted in the run too
		ch, err := root.Child(run.ConsumerName(n))
		if err != nil {
			return errors.Join(err, g.destroy())
		}
		g.alone = ch
		g.pairs.Pair(ch.Path, memGroups[n].Path)
	}
	return nil
}

// unifiedRunGroup makes the run's group in the unified hierarchy, under
// cfg.Unified (nil: this process's own group there); with freezer, one
// the cgroup v2 freezer can stop.
func unifiedRunGroup(cfg execConfig, freezer bool) (*cgroup.Cgroup, error) {
	unified := cfg.Unified
	if unified == nil {
		p, err := cgroup.OwnUnified("/proc")
		if err != nil {
			return nil, err
		}
		unified = &p
	}
	if freezer {
		return unified.CreateFreezeGroup("run-" + cfg.ID)
	}
	return unified.CreatePressureGroup("run-" + cfg.ID)
}

// destroy removes the run's groups in the unified hierarchy (and kills
// anything left in them).
func (g *levers) destroy() error {
	if g.unifiedRoot == nil {
		return nil
	}
	g.pairs.Unpair(g.unifiedRoot.Path)
	for _, l := range g.set {
		if l.unified != nil {
			g.pairs.Unpair(l.unified.Path)
		}
	}
	if g.alone != nil {
		g.pairs.Unpair(g.alone.Path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return g.unifiedRoot.Destroy(ctx)
}

// unifiedJoin opens consumer i's group in the unified hierarchy, where
// memory is on v1, for the consumer to join right after its memory group
// at its start (consumer.Config.JoinUnified); nil where it has none. The
// caller closes it.
func (g *levers) unifiedJoin(i int) (*os.File, error) {
	if i == len(g.set) && g.alone != nil {
		return g.alone.OpenProcs()
	}
	if i >= len(g.set) || g.set[i].unified == nil {
		return nil, nil
	}
	return g.set[i].unified.OpenProcs()
}

// attach gives consumer i's levers once it is started, before anything
// can reap it: its pidfd and its control pipe.
func (g *levers) attach(i, pid int, ctl io.Writer) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		fd = -1 // no page-out; freezing and locking still work
		g.logger.Warn("no pidfd for a consumer: it will not be paged out when frozen", "run", g.runID, "consumer", i, "err", err)
	}
	g.mu.Lock()
	l := &g.set[i]
	l.pidfd, l.ctl = fd, ctl
	g.mu.Unlock()
	return nil
}

// detach drops consumer i's levers once it has exited.
func (g *levers) detach(i int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := &g.set[i]
	l.ctl, l.frozen, l.protected, l.done = nil, false, false, true
	if l.pidfd >= 0 {
		unix.Close(l.pidfd)
		l.pidfd = -1
	}
}

// finished is told that consumer i's work is over: it is thawed, and no
// freeze may hold it from here on. A freeze that is under way when it
// finishes thaws it again once the kernel has frozen it (pull).
func (g *levers) finished(i int) {
	g.mu.Lock()
	l := &g.set[i]
	l.done, l.frozen = true, false
	group := l.group
	g.mu.Unlock()
	if group == nil {
		return
	}
	// Whatever the flag said: a freeze may be on its way to the kernel.
	if err := group.Thaw(); err != nil {
		g.logger.Warn("thawing a consumer whose work is over", "run", g.runID, "consumer", i, "err", err)
	}
}

// mapped is told where consumer i's region is, for its page-out.
func (g *levers) mapped(i int, addr, length uintptr) {
	g.mu.Lock()
	g.set[i].region = [2]uintptr{addr, length}
	g.mu.Unlock()
}

// start lets the policy act: the plan runs (the consumer alone, before it,
// runs under Linux as it is).
func (g *levers) start() {
	g.mu.Lock()
	g.on = true
	g.mu.Unlock()
}

// frozen says whether consumer i is held frozen.
func (g *levers) frozen(i int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.set[i].frozen
}

// Govern steps the run's policy with what the run looks like now and
// carries out its actions, recording each. It does nothing before the
// plan starts (the consumer alone runs under Linux as it is) or once the
// run is ending.
func (r *execution) Govern(t policy.Tick) {
	g := r.levers
	g.stepMu.Lock()
	defer g.stepMu.Unlock()
	g.mu.Lock()
	on := g.on
	g.mu.Unlock()
	if g.closed || !on || r.ctx.Err() != nil {
		return
	}
	for _, a := range g.pol.Step(t) {
		d, done := g.act(r.ctx, a, r.cfg.Now)
		if !done {
			continue
		}
		r.mu.Lock()
		if len(r.rec.Decisions) < run.MaxDecisions {
			r.rec.Decisions = append(r.rec.Decisions, d)
		} else {
			r.rec.DecisionsDropped++
		}
		r.mu.Unlock()
		r.changes.Add(1)
	}
}

// act carries out one action and says what it did: the decision, with its
// error if it failed. Only Govern calls it, one at a time; g.mu is held
// for the lever's state, not across the kernel's work.
func (g *levers) act(ctx context.Context, a policy.Action, now func() time.Time) (run.Decision, bool) {
	err := g.pull(ctx, a)
	if errors.Is(err, errFinished) {
		g.logger.Debug("a policy's action left out: its consumer finished first", "run", g.runID, "policy", g.name, "action", a.String())
		return run.Decision{}, false
	}
	d := run.Decision{At: now(), Kind: string(a.Kind), Consumer: a.Consumer, Why: run.Printable(a.Why)}
	if err != nil {
		d.Error = run.Printable(err.Error())
		g.logger.Warn("a policy's action failed", "run", g.runID, "policy", g.name, "action", a.String(), "err", err)
	}
	g.mu.Lock()
	g.counts[a.Kind]++
	g.mu.Unlock()
	return d, true
}

// errFinished is a freeze of a consumer that finished its work before the
// lever moved (the policy saw the tick before): it is left running to its
// exit, and the action is not a decision (act says so).
var errFinished = errors.New("its work is over: it is exiting")

// protectHeadroom is the share of the limit a protected consumer must
// leave to the others: locked pages cannot be reclaimed, and a consumer
// locking the whole limit would stall the rest for good.
const protectHeadroom = 8

// pull pulls the lever an action names on its consumer.
func (g *levers) pull(ctx context.Context, a policy.Action) error {
	g.mu.Lock()
	if a.Consumer < 0 || a.Consumer >= len(g.set) {
		g.mu.Unlock()
		return fmt.Errorf("no consumer %d in this run", a.Consumer)
	}
	l := &g.set[a.Consumer]
	group := l.group
	g.mu.Unlock()
	switch a.Kind {
	case policy.Freeze:
		return g.freeze(ctx, l, group, a.Consumer)
	case policy.Thaw:
		if group == nil {
			return errors.New("the run has no freezer")
		}
		if err := group.Thaw(); err != nil {
			return err
		}
		g.mu.Lock()
		l.frozen = false
		g.mu.Unlock()
		return nil
	case policy.Protect, policy.Release:
		return g.lock(l, a.Kind == policy.Protect)
	}
	return fmt.Errorf("unknown action %q", a.Kind)
}

// freeze stops consumer i through its group and pages its region out, on
// a goroutine of its own; errFinished when its work ended meanwhile.
func (g *levers) freeze(ctx context.Context, l *lever, group *cgroup.Cgroup, i int) error {
	if group == nil {
		return errors.New("the run has no freezer")
	}
	if g.isDone(l) {
		return errFinished
	}
	if err := group.Freeze(ctx); err != nil {
		_ = group.Thaw() // half-frozen is worse than running
		if g.isDone(l) {
			return errFinished // finished's thaw cut the freeze short
		}
		return err
	}
	g.mu.Lock()
	if l.done {
		// It finished while the freeze went through, and finished's
		// thaw may have come first.
		g.mu.Unlock()
		if err := group.Thaw(); err != nil {
			return fmt.Errorf("its work ended as it was frozen, and thawing it failed: %w", err)
		}
		return errFinished
	}
	l.frozen = true
	// The page-out has its own copy of the pidfd: the consumer's
	// exit closes the lever's.
	region, pidfd := l.region, -1
	if l.pidfd >= 0 && region[1] > 0 {
		pidfd, _ = unix.FcntlInt(uintptr(l.pidfd), unix.F_DUPFD_CLOEXEC, 0)
	}
	g.mu.Unlock()
	if pidfd >= 0 {
		g.pageout.Add(1)
		go func() {
			defer g.pageout.Done()
			defer unix.Close(pidfd)
			if err := pageOut(pidfd, region[0], region[1]); err != nil {
				g.logger.Warn("paging out a frozen consumer", "run", g.runID, "consumer", i, "err", err)
			}
		}()
	}
	return nil
}

func (g *levers) isDone(l *lever) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return l.done
}

// lock protects a consumer's region from reclaim, or ends the protection:
// memory.min on its memory cgroup where memory is on v2, else the consumer
// locks its own region.
func (g *levers) lock(l *lever, on bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if on {
		if lim := g.spec.MemoryLimitBytes; g.spec.SizeBytes > lim-lim/protectHeadroom {
			return fmt.Errorf("refused: its %d MiB would leave under 1/%d of the %d MiB limit to the others", g.spec.SizeBytes>>20, protectHeadroom, lim>>20)
		}
		if l.ctl == nil {
			return errors.New("it is not running")
		}
		if err := g.protect(l, true); err != nil {
			return err
		}
		l.protected = true
		return nil
	}
	l.protected = false
	if l.ctl == nil && g.protection != ProtectMemoryMin {
		return nil // it exited: nothing is locked
	}
	return g.protect(l, false)
}

// protect pulls the run's protection lever on l. Called with g.mu held.
func (g *levers) protect(l *lever, on bool) error {
	if g.protection == ProtectMemoryMin {
		n := int64(0)
		if on {
			n = g.spec.SizeBytes + protectSlack
		}
		return l.mem.Protect(n)
	}
	b, what := consumer.ControlUnlock, "unlock"
	if on {
		b, what = consumer.ControlLock, "lock"
	}
	if _, err := l.ctl.Write([]byte{byte(b)}); err != nil {
		return fmt.Errorf("asking it to %s its region: %w", what, err)
	}
	return nil
}

// releaseAll ends every protection and thaws every consumer, for good:
// the run is ending, and no consumer may be left frozen or locked.
func (g *levers) releaseAll() {
	g.stepMu.Lock()
	g.closed = true
	g.stepMu.Unlock()
	g.mu.Lock()
	for i := range g.set {
		l := &g.set[i]
		if l.protected && (l.ctl != nil || g.protection == ProtectMemoryMin) {
			if err := g.protect(l, false); err != nil {
				g.logger.Warn("ending a consumer's protection at the run's end", "run", g.runID, "consumer", i, "err", err)
			}
		}
		l.protected = false
		if l.group != nil {
			// Thaw whatever the flag says: a freeze cut short by the
			// run's end may have reached the kernel.
			if err := l.group.Thaw(); err != nil {
				g.logger.Warn("thawing a consumer at the run's end", "run", g.runID, "consumer", i, "err", err)
			}
		}
		l.frozen = false
	}
	g.mu.Unlock()
	g.pageout.Wait()
}

// pageOut reclaims a region of the process behind pidfd to swap
// (process_madvise MADV_PAGEOUT, Linux 5.10), as much as one call takes at
// a time.
func pageOut(pidfd int, addr, length uintptr) error {
	for length > 0 {
		iov := struct{ base, len uintptr }{addr, length}
		n, _, e := unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(pidfd), uintptr(unsafe.Pointer(&iov)), 1, unix.MADV_PAGEOUT, 0, 0)
		if e != 0 {
			return fmt.Errorf("process_madvise(MADV_PAGEOUT): %w", e)
		}
		if n == 0 {
			return nil
		}
		addr, length = addr+n, length-min(n, length)
	}
	return nil
}

// PolicyState is what the run's policy is doing, for metrics and the live
// page.
func (r *execution) PolicyState() run.PolicyState {
	s := r.levers.state()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.rec.Decisions); n > 0 {
		d := r.rec.Decisions[n-1]
		s.Last = &d
	}
	return s
}

// state is the policy's counts and what it holds; the last decision is
// the record's.
func (g *levers) state() run.PolicyState {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := run.PolicyState{Policy: g.name, Decisions: map[string]uint64{}}
	for k, n := range g.counts {
		s.Decisions[string(k)] = n
	}
	for _, l := range g.set {
		if l.frozen {
			s.Frozen++
		}
		if l.protected {
			s.Protected++
		}
	}
	if r, ok := g.pol.(policy.Reporter); ok {
		s.Gauges, s.State = r.Gauges(), r.State()
	}
	return s
}
