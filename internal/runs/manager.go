// Package runs manages on-demand runs for the observer and for loadgen run:
// one active run at a time, its record and sample table kept current under
// the data directory, and the clean-up of what a crashed predecessor left.
// It sits between the sampler (which feeds each run's samples) and the API.
package runs

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/master"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// Config configures a Manager.
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
	// OnCycle sees every write cycle (the duration histogram).
	OnCycle func(consumer int, d time.Duration)
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

// Manager runs one run at a time.
type Manager struct {
	cfg     Config
	fileDir string

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
}

type active struct {
	run       *master.Master
	table     *store.Table
	processes *store.ProcessTable
	unsaved   int           // rows since the tables were saved
	sinceRec  int           // rows since the record was saved
	changed   atomic.Bool   // the record changed since it was saved
	saveMu    sync.Mutex    // orders saves of this run
	saved     chan struct{} // closed once the final save landed, or was given up at Close
	// landed: the run's final record and tables are on disk.
	landed atomic.Bool
}

// New opens the manager and cleans up after a predecessor that died
// mid-run: its cgroups are destroyed and its records marked aborted.
func New(cfg Config) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: cfg, outcomes: map[string]uint64{}, recovered: map[string]run.Record{}, closing: make(chan struct{})}
	var err error
	if m.fileDir, err = cfg.Store.Scratch(); err != nil {
		return nil, fmt.Errorf("making the data directory's scratch/ for backing=file: %w", err)
	}
	// Consumers unlink their files at once; anything here is a leftover.
	if ents, err := os.ReadDir(m.fileDir); err == nil {
		for _, e := range ents {
			_ = os.RemoveAll(filepath.Join(m.fileDir, e.Name()))
		}
	}
	return m, m.recover()
}

// recover settles records left active by a dead observer and sweeps its
// run cgroups.
func (m *Manager) recover() error {
	var errs []error
	for _, id := range m.leftActive() {
		if err := m.markAborted(id); err != nil {
			errs = append(errs, err)
		}
	}
	if len(m.recovered) > 0 {
		go m.retry("saving the records of runs a previous observer left", m.saveRecovered)
	}
	if m.cfg.ParentErr == nil {
		errs = append(errs, m.sweep())
	}
	return errors.Join(errs...)
}

// leftActive lists the runs whose records say they are still active: a
// summary a record, so a data dir of large records is not all held at
// once.
func (m *Manager) leftActive() []string {
	var active []string
	for after := ""; ; {
		page, next, err := m.cfg.Store.Summaries(context.Background(), after, store.MaxPageSize)
		if err != nil {
			m.cfg.Logger.Warn("reading run records", "err", err)
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
// a record that cannot be saved now is kept in m.recovered, and the error
// returned.
func (m *Manager) markAborted(id string) error {
	rec, err := m.cfg.Store.LoadRecord(id)
	if err != nil {
		m.cfg.Logger.Warn("reading a run record left active", "run", id, "err", err)
		return nil
	}
	// A record is data, not an order: only a cgroup directly under this
	// observer's --cgroup.parent, with a run's name, and held by no live
	// process is destroyed (by the sweep), whatever path the record names.
	if rec.Cgroup != "" && (m.cfg.ParentErr != nil || filepath.Dir(filepath.Clean(rec.Cgroup)) != filepath.Clean(m.cfg.Parent.Path) ||
		!strings.HasPrefix(filepath.Base(rec.Cgroup), cgroup.Prefix+"run-")) {
		m.cfg.Logger.Warn("a run record names a cgroup outside --cgroup.parent; left alone", "run", rec.ID, "cgroup", strictjson.Clip(rec.Cgroup), "parent", m.cfg.Parent.Path)
	}
	now := time.Now()
	rec.State, rec.EndedAt = run.StateAborted, &now
	rec.Reason = "the observer stopped mid-run (crash or kill); its consumers and cgroup were removed when it restarted"
	for i := range rec.Consumers {
		if rec.Consumers[i].PID != 0 && rec.Consumers[i].Exit == "" {
			rec.Consumers[i].Exit = "killed"
		}
	}
	err = m.cfg.Store.SaveRecord(rec)
	if err != nil {
		m.recovered[rec.ID] = rec
	}
	m.cfg.Logger.Warn("marked a run left by a previous observer aborted", "run", rec.ID, "cgroup", rec.Cgroup)
	return err
}

// saveRecovered tries to save each recovered record not saved yet, and
// reports whether none is left.
func (m *Manager) saveRecovered() bool {
	m.mu.Lock()
	recs := maps.Clone(m.recovered)
	m.mu.Unlock()
	for id, rec := range recs {
		if m.cfg.Store.SaveRecord(rec) == nil {
			m.mu.Lock()
			delete(m.recovered, id)
			m.mu.Unlock()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.recovered) == 0
}

// sweep removes the run cgroups dead observers left under --cgroup.parent.
// Where memory is on cgroup v1, a run under a policy that freezes had a
// group in the unified hierarchy too: its consumers died with their master
// (a frozen task dies of SIGKILL), and the group is left, empty.
func (m *Manager) sweep() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var errs []error
	swept, err := m.cfg.Parent.Sweep(ctx, "run-")
	for _, p := range swept {
		m.cfg.Logger.Warn("removed a stale run cgroup", "cgroup", p)
	}
	errs = append(errs, err)
	if !m.cfg.Parent.V2 {
		if unified, err := cgroup.OwnUnified("/proc"); err == nil {
			swept, err := unified.Sweep(ctx, "run-")
			for _, p := range swept {
				m.cfg.Logger.Warn("removed a stale run freeze group", "cgroup", p)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Host reads what the safety budget needs.
func (m *Manager) Host() (run.Host, error) {
	mem, err := m.cfg.ProcFS.Memory()
	if err != nil {
		return run.Host{}, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(m.fileDir, &st); err != nil {
		return run.Host{}, fmt.Errorf("statfs %s: %w", m.fileDir, err)
	}
	return run.Host{
		MemTotalBytes: int64(mem.TotalBytes), MemAvailableBytes: int64(mem.AvailableBytes),
		SwapTotalBytes: int64(mem.SwapTotalBytes), SwapFreeBytes: int64(mem.SwapFreeBytes),
		DiskFreeBytes: int64(st.Bavail) * st.Bsize,
	}, nil
}

// Start validates a spec against the host and starts it.
func (m *Manager) Start(spec run.Spec) (run.Record, error) {
	r, err := run.Resolve(spec)
	if err != nil {
		return run.Record{}, err
	}
	if m.cfg.ParentErr != nil {
		return run.Record{}, &run.UnsafeError{Msg: "no cgroup for runs: " + m.cfg.ParentErr.Error()}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active != nil && !ended(m.active.run) {
		return run.Record{}, fmt.Errorf("%w: %s", run.ErrBusy, m.active.run.Record().ID)
	}
	// The last run's final record must be on disk before another run
	// takes its place in memory, where readers find it meanwhile.
	if last := m.last; last != nil && ended(last.run) && !last.landed.Load() {
		if err := m.save(last, true); err != nil {
			return run.Record{}, fmt.Errorf("%w: the last run's (%s) final record could not be saved yet (%s); free space there, or make --data.dir writable; nothing was started", run.ErrNoStorage, last.run.Record().ID, errnoText(err))
		}
		last.landed.Store(true)
	}
	host, err := m.Host()
	if err != nil {
		return run.Record{}, err
	}
	if err := r.Check(host); err != nil {
		return run.Record{}, err
	}
	// A run that cannot be recorded is not started: its record would be
	// missing from the list, and its directory from every prune.
	id := newID()
	pending := run.Record{ID: id, Spec: r, State: run.StatePending, StartedAt: time.Now()}
	if err := m.cfg.Store.SaveRecord(pending); err != nil {
		m.writeFailed("saving a new run's record", id, err)
		_ = m.cfg.Store.Remove(id)
		return run.Record{}, fmt.Errorf("%w (%s): free space there, or give --data.dir a file system with room; nothing was started", run.ErrNoStorage, errnoText(err))
	}
	a := &active{table: &store.Table{}, processes: &store.ProcessTable{},
		saved: make(chan struct{})}
	// Saves triggered before master.Start returns wait here for a.run.
	a.saveMu.Lock()
	mr, err := master.Start(master.Config{
		ID:      id,
		Spec:    r,
		Binary:  m.cfg.Binary,
		Parent:  m.cfg.Parent,
		FileDir: m.fileDir,
		Logger:  m.cfg.Logger,
		ProcFS:  m.cfg.ProcFS,
		OnCycle: m.cfg.OnCycle,
		// A change (a consumer started or ended) is saved with the next
		// sample, off the run's goroutines: a save syncs to disk, and 25
		// consumers starting a second apart need one save a second, not 25.
		OnChange: func() { a.changed.Store(true) },
		HostMemory: func() (uint64, uint64) {
			mem, _ := m.cfg.ProcFS.Memory()
			return mem.AvailableBytes, mem.SwapFreeBytes
		},
	})
	a.run = mr
	a.saveMu.Unlock()
	if err != nil {
		_ = m.cfg.Store.Remove(id)
		return run.Record{}, err
	}
	m.active, m.last = a, a
	_ = m.save(a, true) // the pending record is on disk; a failure here is retried with the rest
	rec := mr.Record()
	m.cfg.Logger.Info("run started", "run", rec.ID, "preset", r.Preset, "consumers", r.Consumers,
		"size_bytes", r.SizeBytes, "memory_limit_bytes", r.MemoryLimitBytes, "cgroup", rec.Cgroup, "duration", r.Duration())
	go m.watch(a)
	return rec, nil
}

// watch waits for a run to end, frees the slot and saves it, retrying the
// save until it lands: the run stays in memory meanwhile, so every reader
// (the list, the record, its samples, the live page) sees it as it ended.
func (m *Manager) watch(a *active) {
	<-a.run.Done()
	err := m.save(a, true)
	rec := a.run.Record()
	m.mu.Lock()
	m.outcomes[rec.State]++
	if m.active == a {
		m.active = nil
	}
	m.mu.Unlock()
	if err == nil {
		a.landed.Store(true)
	} else {
		m.retry("saving the final record of run "+rec.ID, func() bool {
			if a.landed.Load() || m.save(a, true) == nil {
				a.landed.Store(true)
			}
			return a.landed.Load()
		})
	}
	if removed, err := m.cfg.Store.Prune(keepRuns); err != nil {
		m.cfg.Logger.Warn("pruning old runs", "err", err)
	} else if len(removed) > 0 {
		m.cfg.Logger.Info("removed the oldest runs' records", "runs", removed, "keep", keepRuns)
	}
	close(a.saved)
}

// save writes the record, and the tables when withTables (or when enough
// rows have gathered); the record last, so one that says a run ended finds
// its final tables beside it. Saves of one run are serialised. It returns
// the first failure.
func (m *Manager) save(a *active, withTables bool) error {
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	if a.run == nil {
		return nil // StartRun failed
	}
	rec := a.run.Record()
	var first error
	failed := func(what string, err error) {
		if err != nil {
			m.writeFailed(what, rec.ID, err)
			first = cmp.Or(first, err)
		}
	}
	if withTables {
		failed("saving the samples", m.cfg.Store.WriteFile(rec.ID, store.SamplesFile, a.table.CSV()))
		failed("saving the per-process table", m.cfg.Store.WriteFile(rec.ID, store.ProcessesFile, a.processes.CSV()))
		if fill := a.run.FillRows(); fill != nil {
			failed("saving the fill table", m.cfg.Store.WriteFile(rec.ID, store.FillFile, store.FillCSV(fill)))
		}
	}
	failed("saving the run record", m.cfg.Store.SaveRecord(rec))
	return first
}

// Backoff of a save retried: from the first to the last wait, doubling.
const (
	retryFirst = time.Second
	retryLast  = 30 * time.Second
)

// retry calls try until it reports done, waiting longer between tries, up
// to retryLast; once the manager is closing, it tries once more and gives
// up, saying what was lost.
func (m *Manager) retry(what string, try func() bool) {
	wait := retryFirst
	for {
		select {
		case <-time.After(wait):
		case <-m.closing:
			if !try() {
				m.cfg.Logger.Error(what+" failed until the observer stopped; a restart marks the run aborted", "data_dir", m.cfg.Store.Path())
			}
			return
		}
		if try() {
			m.cfg.Logger.Info(what + ": saved, after failing")
			return
		}
		wait = min(2*wait, retryLast)
	}
}

// writeFailed logs and counts a failed write to the data directory. A run
// whose later writes fail goes on (its last good files stay in place, each
// whole); the count shows an operator that the disk needs room.
func (m *Manager) writeFailed(what, id string, err error) {
	m.writeErrors.Add(1)
	m.cfg.Logger.Error(what, "run", id, "err", err)
}

// errnoText is the system error inside err ("no space left on device"),
// without the paths around it; or err's text when there is none.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// Observe is the run recorder, a sink of the pipeline: it adds the tick to
// the active run's tables and its detector transition to the run record.
func (m *Manager) Observe(_, tick *pipeline.Tick) {
	m.mu.Lock()
	a := m.active
	m.mu.Unlock()
	if a == nil {
		return
	}
	var verdict indicators.Verdict
	if tick.Verdict != nil {
		verdict = *tick.Verdict
	}
	if tr := verdict.Transition; tr != nil {
		a.run.AddTransition(run.Transition{At: tr.At, To: indicators.StateNames[tr.To], Processes: tr.Names})
	}
	if !tick.Reading.HasRates {
		return
	}
	st := runState{Record: a.run.Record(), Progress: a.run.Progress(), LivePIDs: a.run.PIDs(), CgroupUsageBytes: -1}
	if u, err := a.run.Cgroup().MemoryUsage(); err == nil {
		st.CgroupUsageBytes = u
	}
	row, procRows := rowsOf(tick, st)
	a.processes.AppendSample(procRows)
	a.table.Append(row)
	a.unsaved++
	a.sinceRec++
	switch {
	case a.unsaved >= saveEvery:
		a.unsaved, a.sinceRec = 0, 0
		a.changed.Store(false)
		go func() { _ = m.save(a, true) }() // failures are logged and counted
	case a.sinceRec >= recordEvery && a.changed.Swap(false):
		a.sinceRec = 0
		go func() { _ = m.save(a, false) }()
	}
}

// ended reports whether a run is over; its watcher may not have freed the
// slot yet.
func ended(r *master.Master) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// Scope is the active run's live consumers, tracked whatever their
// activity, and its cgroup limit, for the working-set ratio; the zero Scope
// when no run is active. It is the pipeline's first input.
func (m *Manager) Scope() indicators.Scope {
	r := m.Current()
	if r == nil {
		return indicators.Scope{}
	}
	return indicators.Scope{PIDs: r.PIDs(), LimitBytes: r.Record().Spec.MemoryLimitBytes}
}

// Current is the active run, or nil.
func (m *Manager) Current() *master.Master {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active == nil {
		return nil
	}
	return m.active.run
}

// Close aborts the active run and waits for it to be cleaned up and saved;
// a final save still failing gets one last try.
func (m *Manager) Close() {
	m.closeOnce.Do(func() { close(m.closing) })
	m.mu.Lock()
	a := m.last
	m.mu.Unlock()
	if a == nil {
		return
	}
	a.run.Abort("the observer is shutting down")
	<-a.saved
}

// newID names a run by its start time, with a random suffix: sortable, and
// safe as a path and a cgroup name.
func newID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// OutcomeNames are the runs_total outcomes, so each series exists from 0.
var OutcomeNames = []string{run.StateCompleted, run.StateAborted, run.StateFailed}
