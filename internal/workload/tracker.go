package workload

import (
	"cmp"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/kernfile"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

// Paths names cgroup ids; *Resolver is the kernel's.
type Paths interface {
	Path(id uint64) (string, error)
	Check(id uint64) bool
	// Drop forgets an id whose cgroup is gone.
	Drop(id uint64)
}

// Config configures a Tracker.
type Config struct {
	// TopK is how many workloads are exported: the busiest by recent major
	// faults and memory stall.
	TopK int
	// Depth, when above 0, counts a cgroup deeper than Depth levels in
	// its ancestor at Depth (so a pod's containers count in the pod at 3,
	// kubepods/<qos>/<pod>).
	Depth int
	// Trust names the workloads (Trust.Parse).
	Trust Trust
	Paths Paths
	// Forget drops a removed cgroup from the probe's map.
	Forget func(id uint64)
	// Files says where a workload's cgroup files are; nil reads none.
	Files func(path string) Files
	// Detector holds the thresholds of each workload's detector.
	Detector indicators.DetectorConfig
	// ProcRoot is where /proc is (a process's cgroup, for the host's
	// high-fault processes); "" is /proc.
	ProcRoot string
	Logger   *slog.Logger
}

// Workload is one workload at one sample: a cgroup (with the cgroups
// folded into it at Depth), its labels, its counters and its rates.
type Workload struct {
	Labels
	// Counters are cumulative since the probe first saw the workload, and
	// never go back: a folded cgroup's counts stay in after it is removed.
	Counters readout.CgroupCounters
	// MajorFaultsPerSecond and StallPercent (memory-stall time as a share
	// of one CPU, summed over the workload's tasks) are over the last
	// interval; valid when HasRates.
	MajorFaultsPerSecond, StallPercent float64
	HasRates                           bool
	// IDs are the cgroups counted in it.
	IDs []uint64
	// Kernel is what the cgroup's own files say (read when Config.Files
	// is set), and PSISomePercent and PSIFullPercent its memory.pressure
	// shares of the interval, valid when HasPSIRates.
	Kernel    Kernel
	HasKernel bool
	// Files are where its cgroup files are (read when Config.Files is
	// set), for those who read more of them.
	Files                          Files
	PSISomePercent, PSIFullPercent float64
	HasPSIRates                    bool
	// State is its detector's (indicators.Normal, Monitoring or
	// Thrashing), and Reasons what put it there.
	State   int
	Reasons []string
}

// decay and minActivity are the process ranking's (package sampler): a
// rate halves in about five intervals of quiet.
const (
	decay       = 0.87
	minActivity = 0.01
)

// maxWarnings bounds the distinct reasons logged once each.
const maxWarnings = 100

// checkEvery is how many samples apart every known cgroup is checked for
// removal (one stat each), and an exported workload's files found again;
// the exported ones are read every sample.
const checkEvery = 10

// Tracker follows the cgroups the probes count, folds them into
// workloads, ranks them and keeps the top-K. Not safe for concurrent use:
// the pipeline calls it once a sample.
type Tracker struct {
	cfg      Config
	round    int
	last     time.Time
	byPath   map[string]*tracked
	pathOf   map[uint64]string // resolved ids, with the path they count in
	warnedAt map[string]bool
	// open keeps the exported workloads' cgroup files open between
	// samples; a file no longer read is closed at the end of a sample.
	open kernfile.Set
}

type tracked struct {
	path    string
	members map[uint64]readout.CgroupCounters // the last counts of each member
	retired readout.CgroupCounters            // the counts of members removed
	prev    readout.CgroupCounters
	hasPrev bool
	rate    float64 // decayed major faults per second
	stall   float64 // decayed stall seconds per second
	// This sample's: the counts, and the rates over the interval.
	cur              readout.CgroupCounters
	faults, stallNow float64
	hasRates         bool
	// Where its cgroup files are, found in round filesAt (0: not yet).
	files   Files
	filesAt int
	// The cgroup's pressure when last read, and the detector's state.
	pressure   Pressure
	pressureAt time.Time
	state      int
}

// NewTracker returns a Tracker.
func NewTracker(cfg Config) *Tracker {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Forget == nil {
		cfg.Forget = func(uint64) {}
	}
	if cfg.Detector == (indicators.DetectorConfig{}) {
		cfg.Detector = indicators.DefaultDetectorConfig()
	}
	return &Tracker{cfg: cfg, byPath: map[string]*tracked{}, pathOf: map[uint64]string{}, warnedAt: map[string]bool{}}
}

// Observe takes one sample of the probes' per-cgroup counters and returns
// the top-K workloads, busiest first.
func (t *Tracker) Observe(now time.Time, cgroups map[uint64]readout.CgroupCounters) []Workload {
	return t.ObserveWith(now, cgroups, nil)
}

// ObserveWith is Observe told the host detector's high-fault processes
// while it says the host thrashes (nil otherwise): a workload holding
// MinHigh or more of them thrashes.
func (t *Tracker) ObserveWith(now time.Time, cgroups map[uint64]readout.CgroupCounters, thrashers []int) []Workload {
	t.round++
	secs := now.Sub(t.last).Seconds()
	if t.last.IsZero() || secs <= 0 {
		secs = 0
	}
	t.last = now
	t.gather(cgroups)
	for _, w := range t.byPath {
		w.cur = w.total()
		w.hasRates = w.hasPrev && secs > 0
		if w.hasRates {
			w.faults = float64(sub(w.cur.MajorFaults.Total(), w.prev.MajorFaults.Total())) / secs
			w.stallNow = float64(sub(uint64(w.cur.Stall.Total()), uint64(w.prev.Stall.Total()))) / 1e9 / secs
			w.rate = decay*w.rate + (1-decay)*w.faults
			w.stall = decay*w.stall + (1-decay)*w.stallNow
		}
	}
	top := t.rank()
	held := t.held(thrashers)
	out := make([]Workload, 0, len(top))
	for _, w := range top {
		wl := Workload{
			Labels: t.cfg.Trust.Parse(w.path), Counters: w.cur, IDs: slices.Sorted(maps.Keys(w.members)),
			HasRates: w.hasRates, MajorFaultsPerSecond: w.faults, StallPercent: 100 * w.stallNow,
		}
		t.readKernel(now, w, &wl)
		t.judge(w, &wl, held[w.path])
		out = append(out, wl)
	}
	for _, w := range t.byPath {
		w.prev, w.hasPrev = w.cur, true
	}
	t.open.Sweep()
	return out
}

// Close closes the cgroup files the Tracker keeps open.
func (t *Tracker) Close() { t.open.Close() }

// readKernel reads an exported workload's cgroup files, and its pressure
// shares since the last read.
func (t *Tracker) readKernel(now time.Time, w *tracked, wl *Workload) {
	if t.cfg.Files == nil {
		return
	}
	if w.filesAt == 0 || t.round-w.filesAt >= checkEvery {
		w.files, w.filesAt = t.cfg.Files(w.path), t.round
	}
	wl.Kernel, wl.HasKernel, wl.Files = ReadKernelFrom(&t.open, w.files), true, w.files
	if len(wl.Kernel.Missing) > 0 {
		why := strings.Join(wl.Kernel.Missing, "; ")
		if !t.warnedAt[why] && len(t.warnedAt) < maxWarnings {
			t.cfg.Logger.Info("a workload's cgroup readings left out", "cgroup", wl.Cgroup, "missing", why)
			t.warnedAt[why] = true
		}
	}
	if !wl.Kernel.HasPressure {
		w.pressureAt = time.Time{}
		return
	}
	p := wl.Kernel.Pressure
	if secs := now.Sub(w.pressureAt).Seconds(); !w.pressureAt.IsZero() && secs > 0 {
		wl.HasPSIRates = true
		wl.PSISomePercent = min(100, 100*max(0, (p.Some-w.pressure.Some).Seconds())/secs)
		wl.PSIFullPercent = min(100, 100*max(0, (p.Full-w.pressure.Full).Seconds())/secs)
	}
	w.pressure, w.pressureAt = p, now
}

// judge steps an exported workload's detector, on its PSI full share
// where its cgroup has one, else on the probes' stall share, and logs
// each change of state with why.
func (t *Tracker) judge(w *tracked, wl *Workload, held int) {
	if !wl.HasRates {
		wl.State = w.state
		return
	}
	full := min(100, wl.StallPercent)
	switch {
	case wl.HasPSIRates:
		full = wl.PSIFullPercent
	case wl.Kernel.HasPressure:
		full = 0 // its pressure read once: no share yet
	}
	state, reasons := judge(t.cfg.Detector, w.state, wl.MajorFaultsPerSecond, full, held)
	if state != w.state {
		t.cfg.Logger.Info("a workload's thrash state changed", "cgroup", wl.Cgroup, "unit", wl.Unit, "pod_uid", wl.PodUID,
			"from", indicators.StateNames[w.state], "to", indicators.StateNames[state], "why", strings.Join(reasons, "; "))
	}
	w.state, wl.State, wl.Reasons = state, state, reasons
}

// held counts the processes in each workload, by its folded path, from
// their cgroup in the unified hierarchy (/proc/<pid>/cgroup's "0::" line,
// relative to the observer's cgroup namespace as the workloads' paths are).
// A process gone meanwhile is not counted.
func (t *Tracker) held(pids []int) map[string]int {
	if len(pids) == 0 {
		return nil
	}
	root := cmp.Or(t.cfg.ProcRoot, "/proc")
	out := map[string]int{}
	for _, pid := range pids {
		b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "cgroup"))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
				out[fold(p, t.cfg.Depth)]++
			}
		}
	}
	return out
}

// gather resolves each cgroup the probes counted, folds it into its
// workload, and drops the cgroups that were removed.
func (t *Tracker) gather(cgroups map[uint64]readout.CgroupCounters) {
	checkAll := t.round%checkEvery == 0
	for id, c := range cgroups {
		path, known := t.pathOf[id]
		if known && checkAll && !t.cfg.Paths.Check(id) {
			t.remove(id)
			continue
		}
		if !known {
			p, err := t.cfg.Paths.Path(id)
			if errors.Is(err, ErrGone) {
				t.cfg.Forget(id)
				continue
			}
			if err != nil {
				if !t.warnedAt["resolve"] {
					t.cfg.Logger.Warn("a cgroup could not be named; its faults are not in the workloads' series", "id", id, "err", err)
					t.warnedAt["resolve"] = true
				}
				continue
			}
			path = fold(p, t.cfg.Depth)
			t.pathOf[id] = path
		}
		w := t.byPath[path]
		if w == nil {
			// The probes count a cgroup from zero: a new workload's
			// counts all came since the last sample, and a burst that
			// began and ended between two samples is a rate, not lost.
			w = &tracked{path: path, members: map[uint64]readout.CgroupCounters{}, hasPrev: true}
			t.byPath[path] = w
		}
		// A counter never goes back: a read that missed a CPU's
		// counts on their way into the map (see probe.Probe.Read) is
		// held at the last.
		w.members[id] = c.AtLeast(w.members[id])
	}
	// A cgroup the probes no longer count was removed (its map entry
	// dropped, here or by a previous observer).
	for id := range t.pathOf {
		if _, ok := cgroups[id]; !ok {
			t.remove(id)
		}
	}
}

// remove drops a removed cgroup: its counts stay in a folded workload, and
// a workload left without members goes.
func (t *Tracker) remove(id uint64) {
	path := t.pathOf[id]
	delete(t.pathOf, id)
	t.cfg.Forget(id)
	t.cfg.Paths.Drop(id)
	w := t.byPath[path]
	if w == nil {
		return
	}
	if c, ok := w.members[id]; ok {
		delete(w.members, id)
		w.retired = add(w.retired, c)
	}
	if len(w.members) == 0 {
		delete(t.byPath, path)
	}
	t.cfg.Logger.Debug("a cgroup was removed; its counts stay in its workload while the workload has members", "id", id, "workload", path)
}

// rank is the top-K workloads by decayed major faults plus stall
// milliseconds per second, busiest first.
func (t *Tracker) rank() []*tracked {
	score := func(w *tracked) float64 { return w.rate + 1000*w.stall }
	var ranked []*tracked
	for _, w := range t.byPath {
		if w.rate >= minActivity || w.stall >= minActivity/1000 {
			ranked = append(ranked, w)
		}
	}
	slices.SortFunc(ranked, func(a, b *tracked) int {
		return cmp.Or(cmp.Compare(score(b), score(a)), strings.Compare(a.path, b.path))
	})
	return ranked[:min(len(ranked), max(t.cfg.TopK, 0))]
}

// total is a workload's counts: its members' and its removed members'.
func (w *tracked) total() readout.CgroupCounters {
	c := w.retired
	for _, m := range w.members {
		c = add(c, m)
	}
	return c
}

// fold is the path of the ancestor at depth, or path when it is not
// deeper.
func fold(path string, depth int) string {
	if depth <= 0 {
		return path
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) <= depth {
		return path
	}
	return "/" + strings.Join(parts[:depth], "/")
}

func add(a, b readout.CgroupCounters) readout.CgroupCounters {
	for i := range a.MajorFaults {
		a.MajorFaults[i] += b.MajorFaults[i]
	}
	a.Stall.OffCPU += b.Stall.OffCPU
	a.Stall.Reclaim += b.Stall.Reclaim
	a.Stall.Sampled += b.Stall.Sampled
	for i := range a.Latency.Slots {
		a.Latency.Slots[i] += b.Latency.Slots[i]
	}
	a.Latency.SumSeconds += b.Latency.SumSeconds
	return a
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
