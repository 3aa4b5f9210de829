package diagnosis

import (
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/kernfile"
	"github.com/thrashscope/thrashscope/internal/pagesample"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/swapstate"
	"github.com/thrashscope/thrashscope/internal/workload"
	"golang.org/x/sys/unix"
)

// chargeWindow is how far back the charges are kept for the culprit: a
// neighbour that grew over the last minutes, not since the boot.
const chargeWindow = 5 * time.Minute

// maxChildren bounds the groups read under one shared limit, and maxPIDs
// the processes read in one thrashing group, each sample.
const (
	maxChildren = 64
	maxPIDs     = 4096
)

// StageConfig configures the diagnoses' stage.
type StageConfig struct {
	// V2Mount is the cgroup2 mount the workloads are named in; V1Memory
	// the v1 memory mount where the memory controller is on v1 ("" on a
	// pure cgroup2 host).
	V2Mount, V1Memory string
	// History keeps the closed diagnoses; nil keeps them in memory only.
	History *History
	Logger  *slog.Logger
	// Swap reads the swap disks' busy share and the compressed pools'
	// fill while anything is at monitoring or thrashing; nil leaves both
	// unknown.
	Swap *swapstate.Reader
	// Proc is where the processes' pages are sampled for how they
	// compress ("" samples none).
	Proc string
}

// compressEvery is how often a thrashing group's pages are sampled again,
// and compressPages how many of each of its first compressProcesses
// processes: 1,024 pages (4 MiB) at most, compressed in milliseconds.
const (
	compressEvery     = time.Minute
	compressPages     = 64
	compressProcesses = 16
)

// compression is a group's last compression sample.
type compression struct {
	at    time.Time
	ratio float64
	pages int
}

// Stage is the diagnoses' stage of the pipeline, a sink: each tick it
// samples the workloads at thrashing (reading their limits, processes and
// the charges of the groups that share their limits) and the host, and
// keeps the tracker and the history. At rest, with nothing at monitoring
// or thrashing, it reads no file.
type Stage struct {
	cfg StageConfig

	mu      sync.Mutex
	tracker *Tracker
	closed  []Diagnosis // kept in memory without a History

	// The pipeline's goroutine alone uses these.
	charges  map[string][]Point                // by group in the limits' hierarchy
	followed map[string]time.Time              // shared limits' groups read, until
	prev     map[string]readout.CgroupCounters // each workload's counters at the last tick
	refaults map[string]map[string]uint64      // and its memory.stat refaults
	prevAt   time.Time
	compress map[string]compression // each thrashing group's last sample
	refused  bool                   // the kernel refused a sample: none is tried again
	rng      *rand.Rand
	cpu      atomic.Int64 // nanoseconds of CPU Observe took
	files    memoReader   // this tick's reads of the limits' files
	kept     kernfile.Set // the groups' files, kept open between samples
	// io is each thrashing workload's I/O counts at its last sample;
	// blkio the v1 blkio mount, found once.
	io         map[string]ioSeen
	blkio      string
	blkioKnown bool
}

// NewStage returns the diagnoses' stage.
func NewStage(cfg StageConfig) *Stage {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Stage{cfg: cfg, tracker: NewTracker(), charges: map[string][]Point{}, followed: map[string]time.Time{}, prev: map[string]readout.CgroupCounters{}, refaults: map[string]map[string]uint64{},
		compress: map[string]compression{}, io: map[string]ioSeen{}, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))}
}

// Open is the open diagnoses; History the closed ones, oldest first.
func (s *Stage) Open() []Diagnosis {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tracker.Open()
}

// History is the closed diagnoses, oldest first.
func (s *Stage) History() []Diagnosis {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.History != nil {
		return s.cfg.History.List()
	}
	return slices.Clone(s.closed)
}

// CPUSeconds is the CPU time the stage has taken so far, on its thread.
func (s *Stage) CPUSeconds() float64 { return time.Duration(s.cpu.Load()).Seconds() }

// Observe samples the tick's thrashing workloads and the host. Its own CPU
// time is counted from its thread's clock, the goroutine held to the
// thread meanwhile so that none of another's time is counted.
func (s *Stage) Observe(_, cur *pipeline.Tick) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := threadCPU()
	defer func() { s.cpu.Add(int64(threadCPU() - t0)) }()
	s.observe(cur)
}

// threadCPU is the calling thread's CPU time so far.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func (s *Stage) observe(cur *pipeline.Tick) {
	if cur == nil || cur.Reading == nil || cur.Verdict == nil {
		return
	}
	now := cur.Reading.Time
	// The thrashing groups under one limit share its files, and the
	// files of every group above it: each is read once a tick (25 of a
	// run's consumers' groups, each reading the run's).
	s.files = memoReader{m: map[string]memoRead{}, set: &s.kept}
	defer s.kept.Sweep()
	sw := s.readSwap(cur, now)
	samples, explained := s.sampleWorkloads(cur, now, now.Sub(s.prevAt).Seconds())
	for g := range s.prev {
		if !slices.ContainsFunc(cur.Workloads, func(w workload.Workload) bool { return w.Cgroup == g }) {
			delete(s.prev, g) // out of the top-K: its rates start again when it is back
			delete(s.refaults, g)
			delete(s.io, g)
		}
	}
	s.readFollowed(now)
	s.prune(now)
	samples = append(samples, s.hostSample(cur, explained))
	growth := GrowthOf(s.charges)
	for i := range samples {
		samples[i].Growth = growth
		e := &samples[i].Evidence
		e.DeviceBusyPercent, e.Device, e.PoolFullPercent, e.Pool = sw.DeviceBusyPercent, sw.Device, sw.PoolFullPercent, sw.Pool
	}
	s.prevAt = now
	s.settle(now, samples)
}

// readSwap reads the swap's state while the host or a workload is at
// monitoring or thrashing, so that a thrash's first sample has the
// interval before it; at rest it reads nothing.
func (s *Stage) readSwap(cur *pipeline.Tick, now time.Time) swapstate.State {
	if s.cfg.Swap == nil {
		return swapstate.Unknown
	}
	if cur.Verdict.State < indicators.Monitoring && !slices.ContainsFunc(cur.Workloads, func(w workload.Workload) bool { return w.State >= indicators.Monitoring }) {
		s.cfg.Swap.Reset()
		return swapstate.Unknown
	}
	return s.cfg.Swap.Read(now)
}

// sampleWorkloads keeps each workload's charge and counters, follows the
// shared limits of those at monitoring or thrashing, and samples those at
// thrashing. explained says whether one of them is at a limit of its own
// or an ancestor's.
func (s *Stage) sampleWorkloads(cur *pipeline.Tick, now time.Time, dt float64) (samples []Sample, explained bool) {
	for _, w := range cur.Workloads {
		h, group := s.hierarchyOf(w)
		if w.HasKernel && w.Kernel.CurrentBytes >= 0 {
			s.charges[group] = appendCharge(s.charges[group], now, w.Kernel.CurrentBytes)
		}
		prev, hasPrev := s.prev[w.Cgroup]
		prevRefaults := s.refaults[w.Cgroup]
		s.prev[w.Cgroup], s.refaults[w.Cgroup] = w.Counters, w.Kernel.Refaults
		// A group whose diagnosis is open is sampled once more as it
		// leaves thrashing, so that what ended it is read from it (the
		// tracker is written by this goroutine alone).
		_, open := s.tracker.open[group]
		if w.State < indicators.Monitoring && !open {
			continue
		}
		if w.HasKernel {
			s.files.seed(w.Files, w.Kernel)
		}
		limits, err := h.Limits(s.files, group)
		if err != nil {
			s.cfg.Logger.Debug("no limits for a workload at monitoring", "cgroup", w.Cgroup, "err", err)
			continue
		}
		for _, l := range limits {
			if l.Kind == LimitAncestor {
				s.followed[h.Mount+"\x00"+l.Group] = now.Add(chargeWindow)
			}
		}
		if _, err := Binding(limits, Host{}); err == nil {
			explained = true
		}
		if w.State == indicators.Thrashing || open {
			sm := s.workloadSample(cur, w, group, limits, evidenceOf(w, prev, prevRefaults, hasPrev, dt))
			sm.Thrashing = w.State == indicators.Thrashing
			samples = append(samples, sm)
		}
	}
	return samples, explained
}

// settle updates the tracker with the samples and keeps what closed.
func (s *Stage) settle(now time.Time, samples []Sample) {
	s.mu.Lock()
	closed := s.tracker.Update(now, samples)
	if s.cfg.History == nil {
		s.closed = append(s.closed, closed...)
		if len(s.closed) > HistoryLen {
			s.closed = slices.Clone(s.closed[len(s.closed)-HistoryLen:])
		}
	}
	s.mu.Unlock()
	if s.cfg.History != nil && len(closed) > 0 {
		if err := s.cfg.History.Add(closed...); err != nil {
			s.cfg.Logger.Warn("a closed diagnosis was not saved", "err", err)
		}
	}
	for _, d := range closed {
		s.cfg.Logger.Info("a thrash ended", "group", d.Group, "diagnosis", d.ID, "ended", d.Ended)
	}
}

// hierarchyOf is where w's limits are read, and its group there: the v1
// memory hierarchy where the memory controller is on v1.
func (s *Stage) hierarchyOf(w workload.Workload) (Hierarchy, string) {
	if v1 := w.Files.V1Memory; v1 != "" && s.cfg.V1Memory != "" {
		if rel, err := filepath.Rel(s.cfg.V1Memory, v1); err == nil && !strings.HasPrefix(rel, "..") {
			return Hierarchy{Mount: s.cfg.V1Memory}, "/" + rel
		}
	}
	return Hierarchy{Mount: s.cfg.V2Mount, V2: true}, w.Cgroup
}

// workloadSample is a thrashing workload's sample.
func (s *Stage) workloadSample(cur *pipeline.Tick, w workload.Workload, group string, limits []Limit, e Evidence) Sample {
	pids := readPIDs(s.files, w.Files.V2)
	d := Demand{WorkingSetBytes: -1, ResidentBytes: w.Kernel.CurrentBytes, SwapBytes: w.Kernel.SwapBytes}
	for _, pid := range pids {
		if p, ok := cur.Verdict.Processes[pid]; ok && p.HasWorkingSet {
			d.add(p)
		}
	}
	labels := map[string]string{"cgroup": w.Cgroup}
	for k, v := range map[string]string{"unit": w.Unit, "pod_uid": w.PodUID, "qos": w.QoS} {
		if v != "" {
			labels[k] = v
		}
	}
	if KindOf(e) != KindFile {
		e.CompressRatio, e.CompressPages = s.compressionOf(w.Cgroup, pids, cur.Reading.Time)
	}
	e.IOLimitPercent, e.IOLimit = s.ioLimitOf(w, pids, cur.Reading.Time)
	return Sample{
		Group: group, Labels: labels, Thrashing: true, Limits: limits,
		Host: hostOf(cur), Demand: d, Evidence: e,
		Processes: len(pids), OOMKills: w.Kernel.Events["oom_kill"], NoSwap: noSwap(s.files, s.cfg.V2Mount, w.Files.V2),
	}
}

// compressionOf is how a sample of the group's pages compresses, sampled
// again once a minute while it thrashes.
func (s *Stage) compressionOf(group string, pids []int, now time.Time) (float64, int) {
	if s.cfg.Proc == "" || s.refused {
		return 0, 0
	}
	if c, ok := s.compress[group]; ok && now.Sub(c.at) < compressEvery {
		return c.ratio, c.pages
	}
	res, err := pagesample.Sample(s.cfg.Proc, pids[:min(len(pids), compressProcesses)], compressPages, s.rng)
	if err != nil {
		s.refused = true
		s.cfg.Logger.Info("no compression sample: "+err.Error(), "group", group)
		return 0, 0
	}
	s.compress[group] = compression{at: now, ratio: res.Ratio(), pages: res.Pages}
	return res.Ratio(), res.Pages
}

// noSwap says whether the cgroup v2 group at dir, or an ancestor beneath
// the mount, has a memory.swap.max of 0: it may not swap. An unreadable or
// missing file (cgroup v1, no swap accounting) says nothing.
func noSwap(r Reader, mount, dir string) bool {
	if mount == "" || dir == "" {
		return false
	}
	for d := filepath.Clean(dir); d != mount && strings.HasPrefix(d, mount+"/"); d = filepath.Dir(d) {
		if b, err := r.ReadFileAt(d, "memory.swap.max"); err == nil && strings.TrimSpace(string(b)) == "0" {
			return true
		}
	}
	return false
}

// hostSample is the host's: at thrashing when its detector is and either
// its memory binds or no workload under a limit at its charge explains
// it (a run's thrash in its limited group is the group's diagnosis).
func (s *Stage) hostSample(cur *pipeline.Tick, explained bool) Sample {
	host := hostOf(cur)
	_, err := Binding(nil, host)
	m := cur.Reading.Memory
	d := Demand{WorkingSetBytes: -1, ResidentBytes: host.TotalBytes - host.AvailableBytes, SwapBytes: int64(m.SwapTotalBytes - min(m.SwapFreeBytes, m.SwapTotalBytes))}
	var e Evidence
	for _, p := range cur.Reading.Processes {
		if v, ok := cur.Verdict.Processes[p.PID]; ok && v.HasWorkingSet {
			d.add(v)
		}
		if p.HasRates {
			e.AnonFaultsPerSecond += p.Rates.Faults[readout.Anon]
			e.ShmemFaultsPerSecond += p.Rates.Faults[readout.Shmem]
			e.FileFaultsPerSecond += p.Rates.Faults[readout.File]
		}
	}
	e.DeviceBusyPercent, e.PoolFullPercent, e.IOLimitPercent = -1, -1, -1
	if p := cur.Reading.Pressure; p != nil && cur.Reading.HasRates {
		e.PSISomePercent, e.PSIFullPercent = cur.Reading.Rates.PressureSomePercent, cur.Reading.Rates.PressureFullPercent
	}
	return Sample{
		Group: "", Thrashing: cur.Verdict.State == indicators.Thrashing && (err == nil || !explained),
		Host: host, Demand: d, Evidence: e,
	}
}

func hostOf(cur *pipeline.Tick) Host {
	m := cur.Reading.Memory
	return Host{TotalBytes: int64(m.TotalBytes), AvailableBytes: int64(m.AvailableBytes)}
}

// evidenceOf is a workload's faults by kind over the interval, and its
// PSI shares.
func evidenceOf(w workload.Workload, prev readout.CgroupCounters, prevRefaults map[string]uint64, hasPrev bool, dt float64) Evidence {
	e := Evidence{DeviceBusyPercent: -1, PoolFullPercent: -1, IOLimitPercent: -1}
	if w.HasPSIRates {
		e.PSISomePercent, e.PSIFullPercent = w.PSISomePercent, w.PSIFullPercent
	}
	if !hasPrev || dt <= 0 {
		return e
	}
	rate := func(k readout.Kind) float64 {
		c, p := w.Counters.MajorFaults[k], prev.MajorFaults[k]
		if c < p {
			return 0
		}
		return float64(c-p) / dt
	}
	e.AnonFaultsPerSecond, e.ShmemFaultsPerSecond, e.FileFaultsPerSecond = rate(readout.Anon), rate(readout.Shmem), rate(readout.File)
	refault := func(typ string) float64 {
		c, p := w.Kernel.Refaults[typ], prevRefaults[typ]
		if prevRefaults == nil || c < p {
			return 0
		}
		return float64(c-p) / dt
	}
	e.AnonRefaultsPerSecond, e.FileRefaultsPerSecond = refault("anon"), refault("file")
	return e
}

// readFollowed reads the charge of each group under a followed shared
// limit, so that a neighbour that grew is seen growing.
func (s *Stage) readFollowed(now time.Time) {
	for key, until := range s.followed {
		if now.After(until) {
			delete(s.followed, key)
			continue
		}
		mount, group, _ := strings.Cut(key, "\x00")
		v2 := mount != s.cfg.V1Memory || s.cfg.V1Memory == ""
		file := "memory.usage_in_bytes"
		if v2 {
			file = "memory.current"
		}
		ents, err := os.ReadDir(mount + group)
		if err != nil {
			continue
		}
		n := 0
		for _, e := range ents {
			if !e.IsDir() || n >= maxChildren {
				continue
			}
			n++
			child := strings.TrimSuffix(group, "/") + "/" + e.Name()
			if ps := s.charges[child]; len(ps) > 0 && !ps[len(ps)-1].At.Before(now) {
				continue // a workload's, read with it this sample
			}
			if b, err := readInt(s.files, mount+child, file); err == nil {
				s.charges[child] = appendCharge(s.charges[child], now, b)
			}
		}
	}
}

// prune drops what is older than chargeWindow.
func (s *Stage) prune(now time.Time) {
	for g, ps := range s.charges {
		i := slices.IndexFunc(ps, func(p Point) bool { return now.Sub(p.At) <= chargeWindow })
		if i < 0 {
			delete(s.charges, g)
			continue
		}
		s.charges[g] = ps[i:]
	}
	for g, c := range s.compress {
		if now.Sub(c.at) > 2*compressEvery {
			delete(s.compress, g)
		}
	}
}

func appendCharge(ps []Point, at time.Time, b int64) []Point {
	if n := len(ps); n > 0 && !at.After(ps[n-1].At) {
		return ps
	}
	return append(ps, Point{At: at, Bytes: b})
}
