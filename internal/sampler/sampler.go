// Package sampler is thrashscope's sample loop. Every sample interval it reads
// the probes and procfs once, ranks processes by recent fault activity, and
// keeps the result as the latest Sample: the one reading that the metrics,
// and later the indicators and the sample store, all work from.
package sampler

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/procfs"
)

// ProbeReader is the part of *probe.Probe the sampler uses.
type ProbeReader interface {
	Read() (probe.Snapshot, error)
	Status() []probe.Status
}

// Config configures a Sampler.
type Config struct {
	ProcFS   procfs.FS
	Probe    ProbeReader // nil when running on procfs alone
	Interval time.Duration
	TopK     int
	// Pinned lists processes tracked whatever their activity: the consumers
	// of the active run. Nil means none.
	Pinned func() []int
	// Annotate, when set, completes each new sample before it is
	// published, with the one before it (nil at first): the indicators
	// fill in working sets and the detector's verdict there.
	Annotate func(prev, cur *Sample)
	// OnSample, when set, sees each new sample after it is published; the
	// run manager builds its sample table from them.
	OnSample func(prev, cur *Sample)
	Logger   *slog.Logger
}

// Sample is one reading of the host.
type Sample struct {
	Time     time.Time
	CPU      procfs.CPUSeconds
	VMStat   procfs.VMStat
	Memory   procfs.Memory
	Pressure *procfs.Pressure // nil when the kernel has no PSI
	// PressureTime is when Pressure was read. Its stall totals are divided
	// by the time between two reads, not between the samples' starts: on a
	// thrashing host the reads before it can take a good part of a second,
	// and the share would then pass 100 %.
	PressureTime time.Time
	// Rates are the per-second figures since the previous sample; valid
	// when HasRates (every sample but the first).
	Rates    Rates
	HasRates bool

	// Processes are the tracked ones (top-K plus pinned), busiest first.
	Processes []Process

	// From the probes; empty on procfs alone.
	Probes   []probe.Status
	Latency  map[string]probe.Histogram
	Lost     map[string]uint64
	Programs []probe.ProgramStats // the probes' own cost, while BPF statistics are on

	// From the indicators, when they run (HasDetector).
	HasDetector        bool
	ThrashingState     int // 0 normal, 1 monitoring, 2 thrashing
	HighFaultCount     int
	Transitions        [3]uint64 // cumulative, by state entered (indexed as ThrashingState)
	WorkingSetRatio    float64   // valid when HasWorkingSetRatio
	HasWorkingSetRatio bool
	// WorkingSetScanSeconds is the working-set estimator's own cost so far.
	WorkingSetScanSeconds float64
}

// Process is one tracked process.
type Process struct {
	procfs.Process
	// MajorFaults by kind from the probes, counted since they first saw
	// the process. On procfs alone the kind is unknown and the count is
	// maj_flt.
	MajorFaults probe.FaultCounts
	// Stall is the time in a memory stall, as PSI counts it; valid when
	// HasStall.
	Stall    probe.StallTime
	HasStall bool
	// Activity is the decayed major-fault rate the process was ranked by.
	Activity float64
	// From the indicators: the working set over the last τ in wall-clock
	// time and in the process's own time (the demand), when HasWorkingSet,
	// and membership of the high-fault set.
	WorkingSetBytes uint64
	DemandBytes     uint64
	HasWorkingSet   bool
	HighFault       bool
}

// Sampler runs the sample loop and holds the latest Sample.
type Sampler struct {
	cfg Config

	mu     sync.RWMutex
	latest *Sample

	// Loop state, touched only by the sampling goroutine.
	activity    map[int]*activity
	round       int
	hostMajor   uint64 // pgmajfault at the last sample, on procfs alone
	hasHost     bool
	pids        []int // the last listing of processes, on procfs alone
	listedRound int
}

type activity struct {
	startTicks uint64
	readRound  int // the round its counters were last read
	lastMajor  uint64
	lastStall  uint64
	rate       float64 // exponentially decayed major faults per second
	stallRate  float64
}

// decay weights the newest interval against the history: a rate halves in
// about five intervals of quiet, so ranking follows bursts without flapping.
const decay = 0.87

// minActivity drops a process from the ranking once its decayed rate is
// below one fault per hundred seconds.
const minActivity = 0.01

// quietEvery is how many rounds apart, on procfs alone, a quiet process's
// counters are read, and the processes listed, when the host's own count
// says nothing faulted unseen.
const quietEvery = 30

// New returns a Sampler; call Run to start it.
func New(cfg Config) *Sampler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	return &Sampler{cfg: cfg, activity: make(map[int]*activity)}
}

// Run samples every interval until ctx is done.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if err := s.SampleOnce(); err != nil {
			s.cfg.Logger.Warn("sample failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Latest returns the newest Sample, and false before the first one.
func (s *Sampler) Latest() (*Sample, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.latest, s.latest != nil
}

// SampleOnce takes one reading and publishes it. A source that fails leaves
// its part of the Sample zero and is reported; the rest still publishes.
func (s *Sampler) SampleOnce() error {
	now := time.Now()
	smp := &Sample{Time: now}
	var errs []error
	var err error
	if smp.CPU, err = s.cfg.ProcFS.CPU(); err != nil {
		errs = append(errs, err)
	}
	if smp.VMStat, err = s.cfg.ProcFS.VMStat(); err != nil {
		errs = append(errs, err)
	}
	if smp.Memory, err = s.cfg.ProcFS.Memory(); err != nil {
		errs = append(errs, err)
	}
	if p, err := s.cfg.ProcFS.MemoryPressure(); err == nil {
		smp.Pressure, smp.PressureTime = &p, time.Now()
	} else if !errors.Is(err, procfs.ErrNoData) {
		errs = append(errs, err)
	}

	var snap probe.Snapshot
	if s.cfg.Probe != nil {
		smp.Probes = s.cfg.Probe.Status()
		if snap, err = s.cfg.Probe.Read(); err != nil {
			errs = append(errs, err)
		}
		smp.Latency, smp.Lost, smp.Programs = snap.Latency, snap.Lost, snap.Programs
	}

	s.round++
	candidates, alive, err := s.candidates(snap, smp.VMStat.PgMajFault)
	if err != nil {
		errs = append(errs, err)
	}
	smp.Processes = s.track(candidates, alive)

	s.mu.RLock()
	prev := s.latest
	s.mu.RUnlock()
	if prev != nil {
		smp.Rates, smp.HasRates = RatesBetween(prev, smp), true
	}
	if s.cfg.Annotate != nil {
		s.cfg.Annotate(prev, smp)
	}
	s.mu.Lock()
	s.latest = smp
	s.mu.Unlock()
	if s.cfg.OnSample != nil {
		s.cfg.OnSample(prev, smp)
	}
	return errors.Join(errs...)
}

// candidate is a process the ranking looks at this interval.
type candidate struct {
	pid      int
	major    uint64
	stallNS  uint64
	hasStall bool
	kinds    probe.FaultCounts
	stall    probe.StallTime
	proc     *procfs.Process // already read, on procfs alone
}

// candidates are the processes the probes saw, or, on procfs alone, the
// processes whose counters were read this round, with alive listing every
// process there is (nil with the probes: what they saw is what there is).
//
// On procfs alone each process's maj_flt is in its own /proc/<pid>/stat,
// and reading thousands of them every second costs a good part of a core.
// So a process is read every round while it faults (it is ranked), when it
// is new or pinned; a quiet one in its turn, every quietEvery rounds,
// staggered by pid, and the processes are listed that often. The host's own
// count (pgmajfault) says when that is not enough: if the processes read
// this round do not explain the host's major faults since the last round,
// within 2 % and one fault, the processes are listed and every one is read,
// so one that starts faulting, new or old, is ranked the round it does, as
// if all were read. Faults of a process that exited since its last read
// look unexplained too, and cost one full round.
func (s *Sampler) candidates(snap probe.Snapshot, hostMajor uint64) ([]candidate, map[int]bool, error) {
	if s.cfg.Probe != nil {
		out := make([]candidate, 0, len(snap.Processes))
		for tgid, c := range snap.Processes {
			out = append(out, candidate{pid: int(tgid), major: c.MajorFaults.Total(), stallNS: uint64(c.Stall.Total()), hasStall: true, kinds: c.MajorFaults, stall: c.Stall})
		}
		return out, nil, nil
	}
	hostDelta, hasHost := sub(hostMajor, s.hostMajor), s.hasHost && hostMajor > 0
	s.hostMajor, s.hasHost = hostMajor, hostMajor > 0
	// The listing itself costs about as much as a few hundred reads on a
	// busy host: it is taken every quietEvery rounds, and when a sweep
	// needs it.
	listed := false
	list := func() error {
		if listed {
			return nil
		}
		pids, err := s.cfg.ProcFS.PIDs()
		if err != nil {
			return err
		}
		s.pids, s.listedRound, listed = pids, s.round, true
		return nil
	}
	if s.pids == nil || !hasHost || s.round-s.listedRound >= quietEvery {
		if err := list(); err != nil {
			return nil, nil, err
		}
	}
	alive := make(map[int]bool, len(s.pids))
	for _, pid := range s.pids {
		alive[pid] = true
	}
	done := make(map[int]bool, 64)
	out := make([]candidate, 0, 64)
	var explained uint64
	read := func(pid int) {
		if done[pid] {
			return
		}
		done[pid] = true
		p, err := s.cfg.ProcFS.ProcessStat(pid)
		if err != nil {
			delete(alive, pid) // gone since the listing
			return
		}
		alive[pid] = true
		if a, ok := s.activity[pid]; ok && a.startTicks == p.StartTicks {
			explained += sub(p.MajorFaults, a.lastMajor)
		}
		var kinds probe.FaultCounts
		kinds[probe.Unknown] = p.MajorFaults
		out = append(out, candidate{pid: pid, major: p.MajorFaults, kinds: kinds, proc: &p})
	}
	if s.cfg.Pinned != nil {
		for _, pid := range s.cfg.Pinned() {
			read(pid)
		}
	}
	for _, pid := range s.pids {
		a, ok := s.activity[pid]
		if !ok || !hasHost || a.rate >= minActivity || (s.round+pid)%quietEvery == 0 {
			read(pid)
		}
	}
	if hasHost && hostDelta > explained+1+hostDelta/50 {
		if err := list(); err != nil {
			return nil, nil, err
		}
		for _, pid := range s.pids {
			read(pid)
		}
	}
	return out, alive, nil
}

// track updates each candidate's decayed activity, picks the top-K plus the
// pinned processes, and reads their procfs details.
func (s *Sampler) track(cands []candidate, alive map[int]bool) []Process {
	secs := s.cfg.Interval.Seconds()
	seen := alive
	if seen == nil {
		seen = make(map[int]bool, len(cands))
	}
	byPID := make(map[int]candidate, len(cands))
	for _, c := range cands {
		seen[c.pid] = true
		byPID[c.pid] = c
		a, ok := s.activity[c.pid]
		if !ok {
			// First sight: on procfs alone the counter holds the whole
			// history, so start from it rather than rank it as a burst.
			a = &activity{lastMajor: c.major, lastStall: c.stallNS}
			if c.proc != nil {
				a.startTicks = c.proc.StartTicks
			} else {
				a.lastMajor, a.lastStall = 0, 0 // the probe saw all of it
			}
			a.readRound = s.round - 1
			s.activity[c.pid] = a
		}
		if c.proc != nil && c.proc.StartTicks != a.startTicks {
			*a = activity{startTicks: c.proc.StartTicks, lastMajor: c.major, readRound: s.round - 1}
		}
		// k rounds since the last read (more than one only for a quiet
		// process on procfs alone): the decay of k rounds, and the rate
		// over all of them.
		k := max(s.round-a.readRound, 1)
		dk := math.Pow(decay, float64(k))
		a.rate = dk*a.rate + (1-dk)*float64(sub(c.major, a.lastMajor))/(float64(k)*secs)
		a.stallRate = dk*a.stallRate + (1-dk)*float64(sub(c.stallNS, a.lastStall))/1e9/(float64(k)*secs)
		a.lastMajor, a.lastStall, a.readRound = c.major, c.stallNS, s.round
	}
	for pid := range s.activity {
		if !seen[pid] {
			delete(s.activity, pid) // exited: the probe dropped it
		}
	}

	ranked := make([]int, 0, len(s.activity))
	for pid, a := range s.activity {
		if a.rate >= minActivity || a.stallRate >= minActivity/1000 {
			ranked = append(ranked, pid)
		}
	}
	slices.SortFunc(ranked, func(x, y int) int {
		ax, ay := s.activity[x], s.activity[y]
		return cmp.Or(cmp.Compare(ay.rate, ax.rate), cmp.Compare(ay.stallRate, ax.stallRate), cmp.Compare(x, y))
	})
	if len(ranked) > s.cfg.TopK {
		ranked = ranked[:s.cfg.TopK]
	}
	if s.cfg.Pinned != nil {
		for _, pid := range s.cfg.Pinned() {
			if !slices.Contains(ranked, pid) {
				ranked = append(ranked, pid)
			}
		}
	}

	out := make([]Process, 0, len(ranked))
	for _, pid := range ranked {
		p, err := s.cfg.ProcFS.Process(pid)
		if err != nil {
			continue // exited since: its series goes away
		}
		tp := Process{Process: p}
		if c, ok := byPID[pid]; ok {
			tp.MajorFaults = c.kinds
			tp.Stall, tp.HasStall = c.stall, c.hasStall
		} else if s.cfg.Probe == nil {
			tp.MajorFaults[probe.Unknown] = p.MajorFaults
		} else {
			tp.HasStall = true // pinned, but no fault or stall seen yet
		}
		if a, ok := s.activity[pid]; ok {
			tp.Activity = a.rate
		}
		out = append(out, tp)
	}
	return out
}

func sub(now, before uint64) uint64 {
	if now < before {
		return now // counter reset: a reused pid
	}
	return now - before
}
