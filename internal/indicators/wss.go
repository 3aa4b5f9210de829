package indicators

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/internal/procfs"
)

// The working set W(t, τ) (Denning, 1968) is the set of pages a process
// referenced in the last τ. Every τ the scan reads how many mapped pages
// have their accessed bit set (smaps' Referenced), then clears them all
// (writing "1" to clear_refs: anonymous and file pages alike), so the next
// read counts exactly the pages touched since, to the 4 KiB page: exact
// where DAMON samples, and on every kernel with CONFIG_PROC_PAGE_MONITOR.
// Clearing hides hot pages from reclaim for up to τ, so only the tracked
// processes are scanned, one window a period; reclaim's own scans clear
// bits too, so under pressure W is a lower bound. It needs root (smaps
// under ptrace-read access, clear_refs writable by the owner only).
// docs/metrics.md (Indicators) has the whole of it.

// DefaultPageBudget is 1<<20 pages a second, 4 GiB of mappings per second
// of τ: enough for a whole paper run and the busiest other processes, at a
// cost an observer can carry (bench/README.md, "Where the defaults come
// from"); a host that wants bigger processes measured can pay for them.
const DefaultPageBudget = 1 << 20

// wssInterval is τ when the config leaves it zero.
const wssInterval = time.Second

// WorkingSetConfig configures a WorkingSet.
type WorkingSetConfig struct {
	ProcfsPath string        // "/proc"
	Interval   time.Duration // τ
	// PageBudget bounds the pages walked per second (clear_refs and
	// smaps each walk the page tables of the whole mapping, so cost
	// is about the process's mapped pages). Processes are scanned in the
	// order given (busiest first) until the budget for this round
	// (PageBudget·τ) is spent; the rest are skipped this round and counted.
	// A process bigger than a whole round's budget is never measured. Zero
	// is DefaultPageBudget.
	PageBudget int64
	// Every is how many rounds apart a process's windows open: its
	// accessed bits are cleared one round, read the next (a window of τ),
	// and then left alone until the round before its next window. Two
	// page-table walks every Every·τ instead of every τ, so the scan costs
	// 1/Every of what it does back to back, and the kernel's own LRU
	// aging, which clear_refs disturbs, is left alone most of the time. A
	// process's estimate stands until its next window closes. Processes
	// are staggered by pid, so each round walks about 2/Every of them.
	// Zero or one is back to back: every round reads and clears.
	Every int
	// Stall, when set, returns a process's memory-stall time so far (the
	// probe's, as PSI counts it). The estimator reads it each time it
	// closes one window and opens the next, to know the share of each
	// window the process was stalled, and from it the demand. Nil on
	// procfs alone: the demand is then the working set as measured.
	Stall func(pid int) (time.Duration, bool)
	// FaultService, when set, returns the time a process's major faults
	// took so far (the probe's, from fault entry to its accounting),
	// stalled or not: PSI counts a swap-in or a file read only for a page
	// the kernel had marked part of the working set. Nil on procfs alone.
	FaultService func(pid int) (time.Duration, bool)
	Logger       *slog.Logger
}

// MaxStalledShare caps the share of a window lost to the thrash that the
// demand scales by (at most 10×). The stall and the faults' service time
// sum over threads, so several threads stalled at once can pass 100 % of
// the window. At 0.98 (50×) a page-cache thrash read right (bench/diagnosis
// file, +4 %) where it reads half at 0.9, but a process's whole footprint,
// its runtime's cold pages too, became its demand: e4 at scale 0.1 read
// its shortfall +20 % in one run of four (TestAlertsFireOnARealThrash).
const MaxStalledShare = 0.9

// WorkingSetEstimate is one process's working set over one window.
type WorkingSetEstimate struct {
	// Bytes is W(t, τ) in wall-clock time: the pages referenced in the
	// window. A thrashing process is slowed until what it touches fits
	// in memory, so under pressure Bytes tells what it got, not what it
	// wants.
	Bytes uint64
	// DemandBytes is the working set in the process's own time, as
	// Denning defined it: what it would touch in τ if it were not
	// stalled. It adds to Bytes the pages faulted back in during the
	// window (its major faults, at most its swapped memory: pages
	// referenced early and reclaimed before the read) and divides by the
	// window's unstalled share, 1 − s (s at most MaxStalledShare). Shared
	// pages are split as Pss splits them, so the demands of processes that
	// share a binary add up. It never exceeds Pss + SwapPss (see
	// docs/metrics.md, Indicators).
	DemandBytes uint64
	// Refaulted is the pages faulted back in during the window, in bytes.
	Refaulted uint64
	// StalledShare is s, valid when HasStall: the memory stall's share of
	// the window and, where the kernel keeps it, the share its threads
	// waited runnable for a CPU (RunDelayShare; HasRunDelay), which is no
	// more the process's own time than a stall is: on a busy host it
	// touches its pages more slowly for it, not fewer of them.
	StalledShare float64
	HasStall     bool
	// SystemShare is the share of the window its threads ran in the
	// kernel, and FaultShare (valid when HasFaultShare) the share its
	// major faults took; each counts as lost (the largest of them and the
	// stall) only in a window with major faults: a process's system calls
	// are its own work.
	SystemShare, FaultShare float64
	HasFaultShare           bool
	RunDelayShare           float64
	HasRunDelay             bool
	// From and To bound the window: the middle of the clear that opened it
	// and of the read that closed it (each walks the page tables, and a
	// page's bit is cleared or read somewhere in between).
	From, To time.Time
	// Saturated is set when the share of the window lost to the thrash
	// reached MaxStalledShare: the demand is then a floor, not a
	// reading, and the most it can be is Footprint.
	Saturated bool
	// Irregular is set when the window differs from τ by more than half:
	// the loop ran late, or the process was skipped a round. The bytes are
	// still W(t, To−From), just not W(t, τ).
	Irregular bool

	own       uint64 // Bytes with shared pages split among their processes
	footprint uint64 // Pss + SwapPss + file pages out at the read: the most the demand can be
	out       uint64 // Swap and file pages out at the read: the most that went out again
}

// Footprint is what the process holds at the read (Pss + SwapPss and the
// pages of its shared file mappings out): the most its demand can be.
func (e WorkingSetEstimate) Footprint() uint64 { return e.footprint }

// Window is the window's length, on the monotonic clock.
func (e WorkingSetEstimate) Window() time.Duration { return e.To.Sub(e.From) }

// WorkingSetStats are the estimator's cumulative costs.
type WorkingSetStats struct {
	ScanSeconds      float64 // wall time spent scanning
	PagesScanned     uint64  // Rss+Swap pages of each process scanned, once per round
	ProcessesScanned uint64
	ProcessesSkipped uint64 // left over when a round's budget ran out
}

// WorkingSet estimates the working set of each tracked process every τ.
type WorkingSet struct {
	cfg      WorkingSetConfig
	fs       procfs.FS
	fsErr    error
	pageSize uint64

	scanMu sync.Mutex // one round at a time; guards state, round, noData and buf
	buf    []byte     // the last smaps read, reused
	state  map[int]*wssState
	round  int
	noData error // set once the kernel proved it has no smaps/clear_refs

	mu        sync.RWMutex
	estimates map[int]WorkingSetEstimate
	stats     WorkingSetStats
}

// wssState is what a process's next round needs.
type wssState struct {
	startTicks uint64    // tells a reused pid apart
	cleared    time.Time // when its open window opened; zero when none is open
	last       *WorkingSetEstimate
	swapBytes  uint64      // from the last read: the walk visits swap entries too
	opened     timeReading // its times when its window opened
	majFlt     uint64      // its major faults when its window opened
}

// timeReading is a process's times that are not its own, read as one window
// closes and the next opens: its stall, its major faults' service time,
// its threads' run-queue wait, and its system CPU time. A known flag says
// the figure is kept at all (the probe runs); a has flag that the process
// has one (none yet is none so far).
type timeReading struct {
	stall, service, delay          time.Duration
	hasStall, hasService, hasDelay bool
	stallKnown, serviceKnown       bool
	sys                            time.Duration
}

// NewWorkingSet returns a WorkingSet; call Run, or ScanOnce each round.
func NewWorkingSet(cfg WorkingSetConfig) *WorkingSet {
	if cfg.ProcfsPath == "" {
		cfg.ProcfsPath = "/proc"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = wssInterval
	}
	if cfg.PageBudget <= 0 {
		cfg.PageBudget = DefaultPageBudget
	}
	cfg.Every = max(cfg.Every, 1)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	fs, err := procfs.NewFS(cfg.ProcfsPath)
	return &WorkingSet{
		cfg: cfg, fs: fs, fsErr: err,
		pageSize:  uint64(os.Getpagesize()),
		state:     map[int]*wssState{},
		estimates: map[int]WorkingSetEstimate{},
	}
}

// Run scans every Interval until ctx is done; pids is called each round and
// returns the tracked pids busiest first.
func (w *WorkingSet) Run(ctx context.Context, pids func() []int) {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	var last string
	for {
		err := w.ScanOnce(pids())
		switch {
		case err == nil:
			last = ""
		case errors.Is(err, procfs.ErrNoData):
			if last == "" {
				w.cfg.Logger.Debug("no working-set estimates", "err", err)
			}
			last = err.Error()
		case err.Error() != last:
			// A process we may not scan fails every round: say it once.
			w.cfg.Logger.Warn("working-set scan failed", "err", err)
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Get returns the latest working-set estimate of pid in bytes, and false when
// there is none (first round, skipped, gone).
func (w *WorkingSet) Get(pid int) (bytes uint64, ok bool) {
	e, ok := w.Estimate(pid)
	return e.Bytes, ok
}

// Estimate is Get with the window the figure covers.
func (w *WorkingSet) Estimate(pid int) (WorkingSetEstimate, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	e, ok := w.estimates[pid]
	return e, ok
}

// Stats returns the cumulative costs.
func (w *WorkingSet) Stats() WorkingSetStats {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.stats
}

// ScanOnce does one round: for each pid in order whose turn it is, while the
// round's budget lasts, it reads the working set since its window opened and
// clears the accessed bits to open the next. With Every 1 each process does
// both every round. A process that vanished is dropped silently; other
// failures are returned joined, and the rest of the round goes on.
func (w *WorkingSet) ScanOnce(pids []int) error {
	w.scanMu.Lock()
	defer w.scanMu.Unlock()
	if w.fsErr != nil {
		return w.fsErr
	}
	if w.noData != nil {
		return w.noData
	}
	began := time.Now()
	r := scanRound{budget: int64(float64(w.cfg.PageBudget) * w.cfg.Interval.Seconds())}
	tracked := make(map[int]bool, len(pids))
	w.round++
	for _, pid := range pids {
		if tracked[pid] {
			continue
		}
		tracked[pid] = true
		if !w.scanOne(pid, &r) {
			break
		}
	}
	out := make(map[int]WorkingSetEstimate, len(w.state))
	for pid, st := range w.state {
		switch {
		case !tracked[pid]:
			delete(w.state, pid) // no longer tracked: its bits are left alone
		case st.last != nil:
			out[pid] = *st.last
		}
	}

	w.mu.Lock()
	w.estimates = out
	w.stats.ScanSeconds += time.Since(began).Seconds()
	w.stats.PagesScanned += r.stats.PagesScanned
	w.stats.ProcessesScanned += r.stats.ProcessesScanned
	w.stats.ProcessesSkipped += r.stats.ProcessesSkipped
	w.mu.Unlock()
	if w.noData != nil {
		return w.noData
	}
	return errors.Join(r.errs...)
}

// scanRound is one ScanOnce's budget of pages, what it spent, its counts
// and its errors.
type scanRound struct {
	budget, spent int64
	stats         WorkingSetStats
	errs          []error
}

// clearWindow opens a process's next window: it clears the accessed bits
// (clear_refs) and keeps the stall and major faults it opens at.
func (w *WorkingSet) clearWindow(pid int, st *wssState, now timeReading, proc procfs.Process) error {
	st.opened, st.majFlt = now, proc.MajorFaults
	t0 := time.Now()
	err := w.fs.ClearRefs(pid)
	st.cleared = midpoint(t0, time.Now())
	return err
}

// walkPages is what a walk of the process's page tables costs: it visits
// every present or swapped-out PTE, so resident plus swapped pages; the
// virtual size would count reservations with no page tables (a Go heap's,
// say), which the walk skips for free.
func (w *WorkingSet) walkPages(proc procfs.Process, st *wssState) int64 {
	var swap uint64
	if st != nil {
		swap = st.swapBytes
	}
	return int64((proc.ResidentBytes + swap) / w.pageSize)
}

// take spends pages of the round's budget if they fit, first fit in the
// order given: a busier process never loses the budget to a quieter one,
// and one too big for what is left does not stop smaller ones after it. A
// process that does not fit is counted skipped.
func (r *scanRound) take(pages int64) (int64, bool) {
	if r.spent+pages > r.budget {
		r.stats.ProcessesSkipped++
		return pages, false
	}
	r.spent += pages
	return pages, true
}

// scanOne does a process's part of a round: closes its window (reads the
// referenced pages) in its turn, opens the next (clears them) in the round
// before, within the round's page budget. It returns false when the scan
// must stop: the kernel gives no data.
func (w *WorkingSet) scanOne(pid int, r *scanRound) bool {
	st := w.state[pid]
	// A window opens in the round before the pid's turn (phase n−1)
	// and closes in its turn (phase 0); with n 1 both are every
	// round. A window that could not close in its turn (no budget)
	// closes at the next clear.
	n := w.cfg.Every
	phase := (w.round + pid) % n
	open := st != nil && !st.cleared.IsZero()
	due := phase == 0
	clear := phase == n-1
	if due && st != nil {
		st.last = nil // its turn: a new estimate, or none
	}
	if !clear && !(due && open) {
		return true
	}
	proc, err := w.fs.ProcessStat(pid)
	if err != nil {
		delete(w.state, pid)
		if !errors.Is(err, procfs.ErrProcessGone) {
			r.errs = append(r.errs, fmt.Errorf("working set: %w", err))
		}
		return true
	}
	if st != nil && st.startTicks != proc.StartTicks {
		st, open = nil, false // a new process under an old pid
		delete(w.state, pid)
		if !clear {
			return true
		}
	}
	pages, ok := r.take(w.walkPages(proc, st))
	if !ok {
		// A process skipped keeps its state: next time its window is
		// just longer (and Irregular).
		if st == nil {
			delete(w.state, pid)
		}
		return true
	}
	st, pages, err = w.closeAndOpen(pid, proc, st, open, clear, pages)
	if err != nil {
		return w.drop(pid, r, err)
	}
	w.state[pid] = st
	r.stats.ProcessesScanned++
	r.stats.PagesScanned += uint64(pages)
	return true
}

// closeAndOpen closes pid's open window (its estimate, with the stall over
// it) and, in its clear phase, opens the next; st nil is the first sight.
// It returns the state to keep and the pages walked.
func (w *WorkingSet) closeAndOpen(pid int, proc procfs.Process, st *wssState, open, clear bool, pages int64) (*wssState, int64, error) {
	var est *WorkingSetEstimate
	if st == nil {
		// First sight: nothing was cleared τ ago, so a read now would
		// count every page touched since the process began.
		st = &wssState{startTicks: proc.StartTicks}
	} else if open {
		e, walked, err := w.read(pid, st)
		if err != nil {
			return st, pages, err
		}
		est, pages = &e, walked
		if proc.MajorFaults >= st.majFlt {
			est.Refaulted = (proc.MajorFaults - st.majFlt) * w.pageSize
		}
	}
	// One reading closes this window and opens the next: the read and
	// the clear around it take a few milliseconds.
	now := w.timesOf(pid, proc)
	if est != nil {
		est.demand(st.opened, now)
		st.last, st.cleared = est, time.Time{}
	}
	if clear {
		if err := w.clearWindow(pid, st, now, proc); err != nil {
			return st, pages, err
		}
	}
	return st, pages, nil
}

// drop forgets a process whose read or clear failed, and records why; it
// returns false when the scan must stop (the kernel gives no data).
func (w *WorkingSet) drop(pid int, r *scanRound, err error) bool {
	delete(w.state, pid)
	r.errs = append(r.errs, w.failure(pid, err))
	return w.noData == nil
}

// failure sorts a read or clear error: nil for a process that vanished, the
// error otherwise. A file missing from a live process means the kernel lacks
// it (before 4.14, or without CONFIG_PROC_PAGE_MONITOR); that sets noData.
func (w *WorkingSet) failure(pid int, err error) error {
	switch {
	case errors.Is(err, syscall.ESRCH) || errors.Is(err, procfs.ErrProcessGone):
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if !w.fs.Exists(pid) {
		return nil // the whole process is gone
	}
	w.noData = fmt.Errorf("this kernel has no per-process accessed-bit interface (%w): working sets are not measured: %w", err, procfs.ErrNoData)
	return nil
}

// read closes pid's window: its working set since the last clear, and the
// pages the walk visited.
func (w *WorkingSet) read(pid int, st *wssState) (WorkingSetEstimate, int64, error) {
	t0 := time.Now()
	r, buf, err := w.fs.Smaps(pid, w.buf)
	w.buf = buf
	if err != nil {
		return WorkingSetEstimate{}, 0, err
	}
	e := WorkingSetEstimate{Bytes: r.Referenced, DemandBytes: r.OwnReferenced, From: st.cleared, To: midpoint(t0, time.Now())}
	e.Irregular = absDuration(e.Window()-w.cfg.Interval) > w.cfg.Interval/2
	// A page-cache thrash's pages go out to their file, not to swap: Pss
	// and Swap miss them, and the demand would read no more than what
	// is resident.
	e.own, e.footprint, e.out = r.OwnReferenced, r.PSS+r.SwapPSS+r.FileNotResident, r.Swap+r.FileNotResident
	st.swapBytes = r.Swap
	return e, int64((r.RSS + r.Swap) / w.pageSize), nil
}

// timesOf reads a process's times that are not its own.
func (w *WorkingSet) timesOf(pid int, proc procfs.Process) timeReading {
	var r timeReading
	if r.stallKnown = w.cfg.Stall != nil; r.stallKnown {
		r.stall, r.hasStall = w.cfg.Stall(pid)
	}
	if r.serviceKnown = w.cfg.FaultService != nil; r.serviceKnown {
		r.service, r.hasService = w.cfg.FaultService(pid)
	}
	delay, err := w.fs.RunDelay(pid)
	r.delay, r.hasDelay = delay, err == nil
	r.sys = time.Duration(proc.SystemSeconds * float64(time.Second))
	return r
}

// lostShare is the share of a window a counter that only grows went up by,
// at most MaxStalledShare; 0 when it went back (counters restarted, a
// thread that exited took its part with it).
func lostShare(from, to, window time.Duration) float64 {
	if to < from {
		return 0
	}
	return min((to-from).Seconds()/window.Seconds(), MaxStalledShare)
}

// demand fills DemandBytes from the faults and the times over the window
// that were not the process's own: opened holds them when it opened, now
// as it closes. A process the probe has not seen stall or fault has no
// reading, which is none.
func (e *WorkingSetEstimate) demand(opened, now timeReading) {
	touched := float64(e.own + min(e.Refaulted, e.out))
	window := e.Window()
	if window <= 0 {
		e.DemandBytes = max(e.own, uint64(min(touched, float64(e.footprint))))
		return
	}
	lost := 0.0 // the share of the window that was not the process's own
	if e.HasStall = now.stallKnown; now.hasStall {
		e.StalledShare = lostShare(opened.stall, now.stall, window)
	}
	if e.Refaulted > 0 {
		// A major fault is not the process's own time, stalled or not:
		// two consumers of 200 MiB in 200 MiB (bench/diagnosis short-2x)
		// each took 0.2 s of stall a second, 0.4 s of system time and
		// 0.02 s of user time; a page-cache thrash's 0.1 s of stall and
		// 0.17 s of system time, the rest waiting for its reads. Its
		// service time is the measure (the probe's); its system time the
		// floor of it on procfs alone. They overlap the stall (a fault's
		// reclaim and its read of a working-set page are both): the
		// largest stands for all.
		e.SystemShare = lostShare(opened.sys, now.sys, window)
		if e.HasFaultShare = now.serviceKnown; now.hasService {
			e.FaultShare = lostShare(opened.service, now.service, window)
		}
	}
	lost += max(e.StalledShare, e.SystemShare, e.FaultShare)
	if opened.hasDelay && now.hasDelay && now.delay >= opened.delay {
		e.RunDelayShare, e.HasRunDelay = lostShare(opened.delay, now.delay, window), true
		lost += e.RunDelayShare
	}
	e.Saturated = lost >= MaxStalledShare
	touched /= 1 - min(lost, MaxStalledShare)
	e.DemandBytes = max(e.own, uint64(min(touched, float64(e.footprint))))
}

func midpoint(a, b time.Time) time.Time { return a.Add(b.Sub(a) / 2) }

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
