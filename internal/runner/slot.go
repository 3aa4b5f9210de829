package runner

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/outdir"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
)

// Config configures a Slot.
type Config struct {
	Store *store.Dir
	// Parent is where run cgroups go. ParentErr, when set, says why there
	// is none, and every run is refused with it.
	Parent    cgroup.Parent
	ParentErr error
	// Binary is the loadgen executable the consumers run as.
	Binary string
	ProcFS procfs.FS
	Logger *slog.Logger
	// Pairs learns each run's groups in the unified hierarchy with their
	// memory groups, where memory is on v1 (execConfig.Pairs).
	Pairs *cgroup.Pairs
	// AllowHostSettings is the operator's opt-in to runs that change a
	// host-wide memory setting (--settings.allow-host).
	AllowHostSettings bool
	// StateDir is where the host's settings lock and journal are
	// (--settings.state-dir; settings.DefaultStateDir when empty): one
	// place that every thrashscope process on the host shares.
	StateDir string
}

// saveEvery is how many sample rows pass between saves of the table.
const saveEvery = 10

// recordEvery is how many sample rows pass at least between saves of a
// changed record (a consumer started or ended). The API serves the live
// record from memory; the file is for a restart after a crash, which
// loses at most these seconds of consumer detail of a run it marks
// aborted. A save syncs to disk, on a host whose disk is busy paging.
const recordEvery = 5

// keepRuns is how many ended runs the data directory keeps.
const keepRuns = 100

// abortWait bounds how long DELETE waits for a run to be gone.
const abortWait = 10 * time.Second

// Slot holds one run at a time.
type Slot struct {
	cfg     Config
	fileDir string
	// held is the data directory, locked for this process while it runs
	// runs there.
	held *outdir.Dir

	mu       sync.Mutex
	active   *active
	last     *active // the most recent run, active or not, for metrics
	outcomes map[string]uint64
	// recovered are records a dead predecessor left active, marked
	// aborted, whose save has not landed yet: readers are given these.
	recovered map[string]run.Record
	// closing is closed by Close: a final save being retried makes one
	// last attempt and gives up.
	closing   chan struct{}
	closeOnce sync.Once

	writeErrors atomic.Uint64 // failed writes to the data directory
	// cycles are the write cycles of the runs before the last one.
	cycles run.CycleHistogram

	source   Source
	recorder Recorder
	governor Governor
	service  Service
}

// Running is what the runner's stages read of and do to a run in progress
// (an *execution).
type Running interface {
	Record() run.Record
	Progress() run.Progress
	PolicyState() run.PolicyState
	// PIDs are the consumers running now.
	PIDs() []int
	// MemoryUsage is the run cgroup's.
	MemoryUsage() (int64, error)
	AddTransition(run.Transition)
	// Changes counts the record's changes so far.
	Changes() uint64
	// CycleDurations are the durations of the run's write cycles so far.
	CycleDurations() run.CycleHistogram
	// Govern has the run's policy decide on the tick, and carries it out.
	Govern(policy.Tick)
	FillRows() []store.FillRow
	Abort(reason string)
	Done() <-chan struct{}
}

type active struct {
	run          Running
	table        *store.Table
	processes    *store.ProcessTable
	unsaved      int           // rows since the tables were saved
	sinceRec     int           // rows since the record was saved
	savedChanges uint64        // the run's Changes when its record was last saved
	saveMu       sync.Mutex    // orders saves of this run
	saved        chan struct{} // closed once the final save landed, or was given up at Close
	// landed: the run's final record and tables are on disk.
	landed atomic.Bool
}

// ErrDataDirInUse says another process runs runs in the data directory.
var ErrDataDirInUse = errors.New("the data directory is in use")

// New opens the runner and cleans up after a predecessor that died
// mid-run: its cgroups are destroyed and its records marked aborted.
func New(cfg Config) (*Slot, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Slot{cfg: cfg, outcomes: map[string]uint64{}, recovered: map[string]run.Record{}, closing: make(chan struct{})}
	e.source = Source{current: e.current}
	e.recorder = Recorder{current: e.currentEntry, save: e.saveInBackground}
	e.governor = Governor{current: e.current, procFS: cfg.ProcFS}
	e.service = Service{e: e}
	// One process at a time on a data directory: a second would clear the
	// first's scratch files and mark its live run aborted.
	held, err := outdir.Open(cfg.Store.Path(), 0o750)
	if err == nil {
		err = held.Lock()
		if err != nil {
			held.Close()
		}
	}
	switch {
	case errors.Is(err, outdir.ErrLocked):
		return nil, fmt.Errorf("%w: %s is held by another thrashscope process (an observer, loadgen run or compare): give each its own, or stop that one first", ErrDataDirInUse, cfg.Store.Path())
	case err != nil:
		return nil, fmt.Errorf("locking the data directory: %w", err)
	}
	e.held = held
	cfg.Store.ClearTemp()
	if e.fileDir, err = cfg.Store.Scratch(); err != nil {
		held.Close()
		return nil, fmt.Errorf("making the data directory's scratch/ for backing=file: %w", err)
	}
	// Consumers unlink their files at once; anything here is a leftover.
	if ents, err := os.ReadDir(e.fileDir); err == nil {
		for _, ent := range ents {
			_ = os.RemoveAll(filepath.Join(e.fileDir, ent.Name()))
		}
	}
	e.recoverSettings()
	return e, e.recover()
}

// Stages are the run's stages of the pipeline, for pipeline.Declare: the
// scope, the recorder and the policy after it.
func (e *Slot) Stages() *pipeline.RunStages {
	return &pipeline.RunStages{Scope: e.source.Scope, Recorder: &e.recorder, Policy: &e.governor}
}

// Service is the runner as the API's backend and the run metrics' source.
func (e *Slot) Service() *Service { return &e.service }

// Host reads what the safety budget needs.
func (e *Slot) Host() (run.Host, error) {
	mem, err := e.cfg.ProcFS.Memory()
	if err != nil {
		return run.Host{}, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(e.fileDir, &st); err != nil {
		return run.Host{}, fmt.Errorf("statfs %s: %w", e.fileDir, err)
	}
	return run.Host{
		MemTotalBytes: int64(mem.TotalBytes), MemAvailableBytes: int64(mem.AvailableBytes),
		SwapTotalBytes: int64(mem.SwapTotalBytes), SwapFreeBytes: int64(mem.SwapFreeBytes),
		DiskFreeBytes: int64(st.Bavail) * st.Bsize,
	}, nil
}

// Start validates a spec against the host and starts it.
func (e *Slot) Start(spec run.Spec) (run.Record, error) {
	r, err := run.Resolve(spec)
	if err != nil {
		return run.Record{}, err
	}
	if e.cfg.ParentErr != nil {
		return run.Record{}, &run.UnsafeError{Msg: "no cgroup for runs: " + e.cfg.ParentErr.Error()}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.admitLocked(r); err != nil {
		return run.Record{}, err
	}
	// A run that cannot be recorded is not started: its record would be
	// missing from the list, and its directory from every prune.
	id := newID()
	journal, err := e.beginSettings(id, r)
	if err != nil {
		return run.Record{}, err
	}
	pending := newRecord(id, r, time.Now())
	if err := e.cfg.Store.SaveRecord(pending); err != nil {
		e.writeFailed("saving a new run's record", id, err)
		e.notStarted(id, journal)
		return run.Record{}, fmt.Errorf("%w (%s): free space there, or give --data.dir a file system with room; nothing was started", run.ErrNoStorage, errnoText(err))
	}
	a := &active{table: &store.Table{}, processes: &store.ProcessTable{},
		saved: make(chan struct{})}
	// Saves triggered before execute returns wait here for a.run.
	a.saveMu.Lock()
	mr, err := execute(execConfig{
		ID:      id,
		Spec:    r,
		Binary:  e.cfg.Binary,
		Parent:  e.cfg.Parent,
		FileDir: e.fileDir,
		Logger:  e.cfg.Logger,
		ProcFS:  e.cfg.ProcFS,
		Pairs:   e.cfg.Pairs,
		Journal: journal,
	})
	a.run = mr
	a.saveMu.Unlock()
	if err != nil {
		e.notStarted(id, journal)
		return run.Record{}, err
	}
	if e.last != nil {
		e.cycles.Add(e.last.run.CycleDurations())
	}
	e.active, e.last = a, a
	_ = e.save(a, true) // the pending record is on disk; a failure here is retried with the rest
	rec := mr.Record()
	e.cfg.Logger.Info("run started", "run", rec.ID, "preset", r.Preset, "consumers", r.Consumers,
		"size_bytes", r.SizeBytes, "memory_limit_bytes", r.MemoryLimitBytes, "cgroup", rec.Cgroup, "duration", r.Duration())
	go e.watch(a)
	return rec, nil
}

// admitLocked says whether r may start now: the slot free, the last run's
// final record on disk (before another run takes its place in memory,
// where readers find it meanwhile), and the host able to take r. Called
// with e.mu held.
func (e *Slot) admitLocked(r run.Resolved) error {
	if e.active != nil && !ended(e.active.run) {
		return fmt.Errorf("%w: %s", run.ErrBusy, e.active.run.Record().ID)
	}
	if last := e.last; last != nil && ended(last.run) && !last.landed.Load() {
		if err := e.save(last, true); err != nil {
			return fmt.Errorf("%w: the last run's (%s) final record could not be saved yet (%s); free space there, or make --data.dir writable; nothing was started", run.ErrNoStorage, last.run.Record().ID, errnoText(err))
		}
		last.landed.Store(true)
	}
	host, err := e.Host()
	if err != nil {
		return err
	}
	return r.Check(host)
}

// watch waits for a run to end, frees the slot and saves it, retrying the
// save until it lands: the run stays in memory meanwhile, so every reader
// (the list, the record, its samples, the live page) sees it as it ended.
func (e *Slot) watch(a *active) {
	<-a.run.Done()
	err := e.save(a, true)
	rec := a.run.Record()
	e.mu.Lock()
	e.outcomes[rec.State]++
	if e.active == a {
		e.active = nil
	}
	e.mu.Unlock()
	if err == nil {
		a.landed.Store(true)
	} else {
		e.retry("saving the final record of run "+rec.ID, func() bool {
			if a.landed.Load() || e.save(a, true) == nil {
				a.landed.Store(true)
			}
			return a.landed.Load()
		})
	}
	if removed, err := e.cfg.Store.Prune(keepRuns); err != nil {
		e.cfg.Logger.Warn("pruning old runs", "err", err)
	} else if len(removed) > 0 {
		e.cfg.Logger.Info("removed the oldest runs' records", "runs", removed, "keep", keepRuns)
	}
	close(a.saved)
}

// currentEntry is the active run's slot, or nil.
func (e *Slot) currentEntry() *active {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active
}

// current is the active run, or nil.
func (e *Slot) current() Running {
	if a := e.currentEntry(); a != nil {
		return a.run
	}
	return nil
}

// Active is the active run, or nil.
func (e *Slot) Active() Running { return e.current() }

// ended reports whether a run is over; its watcher may not have freed the
// slot yet.
func ended(r Running) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// Close aborts the active run and waits for it to be cleaned up and saved;
// a final save still failing gets one last try.
func (e *Slot) Close() {
	e.closeOnce.Do(func() { close(e.closing) })
	e.mu.Lock()
	a := e.last
	e.mu.Unlock()
	if a != nil {
		a.run.Abort("the observer is shutting down")
		<-a.saved
	}
	// scratch/ is made at the start for backing=file consumers, who unlink
	// their files at once: empty, it goes (a comparison's or loadgen's
	// output directory keeps only its runs).
	_ = os.Remove(e.fileDir)
	e.held.Close()
}

// newID names a run by its start time, with a random suffix: sortable, and
// safe as a path and a cgroup name.
func newID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}
