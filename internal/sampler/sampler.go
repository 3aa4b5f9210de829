// Package sampler reads the host: once a tick it reads the probes and procfs,
// ranks processes by recent fault activity and returns a Reading, the first
// stage of the pipeline (package pipeline) that the indicators, the metrics,
// the live page and the run recorder all work from.
package sampler

import (
	"cmp"
	"errors"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/thrashscope/thrashscope/internal/kernfile"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/procfs"
)

// ProbeReader is the part of *probe.Probe the sampler uses.
type ProbeReader interface {
	Read() (readout.Snapshot, error)
	// Arm attaches or detaches the on-demand hooks for what a reading saw.
	Arm(now time.Time, snap readout.Snapshot)
	Status() []readout.Status
}

// Config configures a Sampler.
type Config struct {
	ProcFS   procfs.FS
	Probe    ProbeReader // nil when running on procfs alone
	Interval time.Duration
	// Now is the clock (time.Now when nil).
	Now    func() time.Time
	TopK   int
	Logger *slog.Logger
}

// Source is one of the kernel's sources a reading takes.
type Source int

// The sources, in the order a reading takes them.
const (
	SourceStat      Source = iota // /proc/stat: CPU time
	SourceVMStat                  // /proc/vmstat: paging and faults
	SourceMeminfo                 // /proc/meminfo
	SourcePressure                // /proc/pressure/memory, where the kernel has PSI
	SourceProbes                  // the BPF probes' maps
	SourceProcesses               // the listing of /proc, on procfs alone
	NumSources
)

// SourceNames are the sources' names, as the source label of
// thrashscope_source_success and thrashscope_source_failures_total.
var SourceNames = [NumSources]string{"stat", "vmstat", "meminfo", "pressure", "probes", "processes"}

func (s Source) String() string { return SourceNames[s] }

// Reading is one reading of the host.
type Reading struct {
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
	Probes   []readout.Status
	Latency  map[string]readout.Histogram
	Lost     map[string]uint64
	Programs []readout.ProgramStats // the probes' own cost, while BPF statistics are on
	// Cgroups are the probes' per-cgroup counters, by cgroup v2 id; nil
	// when they are off or the maps failed to read.
	Cgroups          map[uint64]readout.CgroupCounters
	CgroupEventsLost uint64
	// RemovedCgroupsLost counts removed cgroups whose last counts were
	// dropped (readout.Snapshot's).
	RemovedCgroupsLost uint64

	// Failed holds, for each source this reading could not read, why;
	// nil for a source read (or one this host does not have). A failed
	// source's part of the reading is zero and must not be exported.
	Failed [NumSources]error
	// Used says which sources this observer reads: PSI where the kernel
	// has it, the probes where they loaded, the listing on procfs alone.
	Used [NumSources]bool
	// Failures counts each source's failed reads since the start.
	Failures [NumSources]uint64
}

// OK reports whether src was read: used, and not failed.
func (r *Reading) OK(src Source) bool { return r.Used[src] && r.Failed[src] == nil }

// Whole reports whether no source failed: only then are the reading's
// figures all the kernel's, and rates against it meaningful.
func (r *Reading) Whole() bool {
	for _, err := range r.Failed {
		if err != nil {
			return false
		}
	}
	return true
}

// Process is one tracked process.
type Process struct {
	procfs.Process
	// MajorFaults by kind from the probes, counted since they first saw
	// the process. On procfs alone the kind is unknown and the count is
	// maj_flt.
	MajorFaults readout.FaultCounts
	// Stall is the time in a memory stall, as PSI counts it; valid when
	// HasStall.
	Stall    readout.StallTime
	HasStall bool
	// Activity is the decayed major-fault rate the process was ranked by.
	Activity float64
	// Rates since the reading before; valid when HasRates.
	Rates    ProcessRates
	HasRates bool
}

// Sampler takes Readings, one at a time: it keeps what the ranking and the
// rates need from the readings before.
type Sampler struct {
	cfg Config

	prev        *Reading // the last reading, for rates
	failures    [NumSources]uint64
	failing     [NumSources]bool // failed at the last read, for the log
	hasPSI      bool             // the kernel has PSI: a pressure file was read
	activity    map[int]*activity
	round       int
	hostMajor   uint64 // pgmajfault at the last sample, on procfs alone
	hasHost     bool
	pids        []int // the last listing of processes, on procfs alone
	listedRound int
	// files keeps the tracked processes' stat and status open from one
	// reading to the next; a process no longer tracked has them closed.
	files kernfile.Set
}

type activity struct {
	startTicks uint64
	readRound  int       // the round its counters were last read
	readAt     time.Time // and when
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

// New returns a Sampler.
func New(cfg Config) *Sampler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Sampler{cfg: cfg, activity: make(map[int]*activity)}
}

// Read takes one reading; pinned are processes tracked whatever their
// activity (the active run's consumers). A source that fails is named in
// the Reading's Failed and left zero, counted, and logged when it starts
// and stops failing; the sources read are whole. The rates of a reading
// that is not whole, and of the one after it, are not computed: they would
// span the gap (a counter read as 0, then back, is a spike). One caller at
// a time: the pipeline's loop.
func (s *Sampler) Read(pinned []int) (*Reading, error) {
	now := s.cfg.Now()
	smp := &Reading{Time: now}
	smp.Used[SourceStat], smp.Used[SourceVMStat], smp.Used[SourceMeminfo] = true, true, true
	smp.CPU, smp.Failed[SourceStat] = s.cfg.ProcFS.CPU()
	smp.VMStat, smp.Failed[SourceVMStat] = s.cfg.ProcFS.VMStat()
	smp.Memory, smp.Failed[SourceMeminfo] = s.cfg.ProcFS.Memory()
	// PSI is used where the kernel has it; once read, a file gone is a
	// failed read too, not a kernel that lost PSI.
	if p, err := s.cfg.ProcFS.MemoryPressure(); err == nil {
		smp.Pressure, smp.PressureTime = &p, time.Now()
		s.hasPSI = true
	} else if s.hasPSI || !errors.Is(err, procfs.ErrNoData) {
		smp.Failed[SourcePressure] = err
	}
	smp.Used[SourcePressure] = s.hasPSI || smp.Failed[SourcePressure] != nil

	var snap readout.Snapshot
	if s.cfg.Probe != nil {
		smp.Used[SourceProbes] = true
		smp.Probes = s.cfg.Probe.Status()
		snap, smp.Failed[SourceProbes] = s.cfg.Probe.Read()
		if smp.Failed[SourceProbes] == nil {
			s.cfg.Probe.Arm(time.Now(), snap)
		}
		smp.Latency, smp.Lost, smp.Programs = snap.Latency, snap.Lost, snap.Programs
		smp.Cgroups, smp.CgroupEventsLost, smp.RemovedCgroupsLost = snap.Cgroups, snap.CgroupEventsLost, snap.RemovedCgroupsLost
	} else {
		smp.Used[SourceProcesses] = true
	}

	s.round++
	// Without the processes' counters (the probes' maps, or the listing)
	// the ranking would take every process for gone: it is left as it
	// was, and the reading has no processes.
	if smp.Failed[SourceProbes] == nil {
		candidates, alive, err := s.candidates(snap, smp.VMStat.PgMajFault, pinned)
		if err != nil {
			smp.Failed[SourceProcesses] = err
		} else {
			smp.Processes = s.track(now, candidates, alive, pinned)
		}
	}
	var errs []error
	for src, err := range smp.Failed {
		s.note(Source(src), err)
		if err != nil {
			errs = append(errs, err)
		}
	}
	smp.Failures = s.failures
	if s.prev != nil && s.prev.Whole() && smp.Whole() {
		Complete(s.prev, smp)
	}
	s.prev = smp
	return smp, errors.Join(errs...)
}

// Close closes the tracked processes' files it keeps open; a Read after it
// opens them again.
func (s *Sampler) Close() { s.files.Close() }

// note counts a source's failed read, and logs when a source starts
// failing and when it reads again: once, not at every interval.
func (s *Sampler) note(src Source, err error) {
	switch {
	case err != nil && !s.failing[src]:
		s.cfg.Logger.Error("a source failed; its series are not exported until it reads again", "source", src.String(), "err", err)
	case err == nil && s.failing[src]:
		s.cfg.Logger.Info("a source reads again", "source", src.String(), "failed_reads", s.failures[src])
	}
	if err != nil {
		s.failures[src]++
	}
	s.failing[src] = err != nil
}

// candidate is a process the ranking looks at this interval.
type candidate struct {
	pid      int
	major    uint64
	stallNS  uint64
	hasStall bool
	kinds    readout.FaultCounts
	stall    readout.StallTime
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
func (s *Sampler) candidates(snap readout.Snapshot, hostMajor uint64, pinned []int) ([]candidate, map[int]bool, error) {
	if s.cfg.Probe != nil {
		return probeCandidates(snap), nil, nil
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
	sw := newSweep(s)
	for _, pid := range pinned {
		sw.read(pid)
	}
	for _, pid := range s.pids {
		a, ok := s.activity[pid]
		if !ok || !hasHost || a.rate >= minActivity || (s.round+pid)%quietEvery == 0 {
			sw.read(pid)
		}
	}
	if hasHost && hostDelta > sw.explained+1+hostDelta/50 {
		if err := list(); err != nil {
			return nil, nil, err
		}
		for _, pid := range s.pids {
			sw.read(pid)
		}
	}
	return sw.out, sw.alive, nil
}

// probeCandidates are every process the probes counted.
func probeCandidates(snap readout.Snapshot) []candidate {
	out := make([]candidate, 0, len(snap.Processes))
	for tgid, c := range snap.Processes {
		out = append(out, candidate{pid: int(tgid), major: c.MajorFaults.Total(), stallNS: uint64(c.Stall.Total()), hasStall: true, kinds: c.MajorFaults, stall: c.Stall})
	}
	return out
}

// sweep is one round's reads of /proc/<pid>/stat on procfs alone: each
// pid read once, the listed pids known alive or gone, and the major faults
// the reads explain of the host's.
type sweep struct {
	s         *Sampler
	alive     map[int]bool
	done      map[int]bool
	out       []candidate
	explained uint64
}

func newSweep(s *Sampler) *sweep {
	sw := &sweep{s: s, alive: make(map[int]bool, len(s.pids)), done: make(map[int]bool, 64), out: make([]candidate, 0, 64)}
	for _, pid := range s.pids {
		sw.alive[pid] = true
	}
	return sw
}

// read reads pid once.
func (sw *sweep) read(pid int) {
	if sw.done[pid] {
		return
	}
	sw.done[pid] = true
	p, err := sw.s.cfg.ProcFS.ProcessStat(pid)
	if err != nil {
		delete(sw.alive, pid) // gone since the listing
		return
	}
	sw.alive[pid] = true
	if a, ok := sw.s.activity[pid]; ok && a.startTicks == p.StartTicks {
		sw.explained += sub(p.MajorFaults, a.lastMajor)
	}
	var kinds readout.FaultCounts
	kinds[readout.Unknown] = p.MajorFaults
	sw.out = append(sw.out, candidate{pid: pid, major: p.MajorFaults, kinds: kinds, proc: &p})
}

// track updates each candidate's decayed activity, picks the top-K plus the
// pinned processes, and reads their procfs details.
func (s *Sampler) track(now time.Time, cands []candidate, alive map[int]bool, pinned []int) []Process {
	byPID := s.decayActivity(now, cands, alive)
	return s.processes(s.rank(pinned), byPID)
}

// decayActivity folds each candidate's faults and stall since its last
// read into its decayed rates, and forgets the processes that are gone. It
// returns the candidates by pid.
func (s *Sampler) decayActivity(now time.Time, cands []candidate, alive map[int]bool) map[int]candidate {
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
		// The time since the last read: k rounds (more than one only for
		// a quiet process on procfs alone), shorter than an interval when
		// a wake brought the round early. The decay is an interval's per
		// interval of it, the rate over all of it.
		elapsed := now.Sub(a.readAt).Seconds()
		if a.readAt.IsZero() || elapsed <= 0 {
			elapsed = float64(max(s.round-a.readRound, 1)) * secs
		}
		dk := math.Pow(decay, elapsed/secs)
		a.rate = dk*a.rate + (1-dk)*float64(sub(c.major, a.lastMajor))/elapsed
		a.stallRate = dk*a.stallRate + (1-dk)*float64(sub(c.stallNS, a.lastStall))/1e9/elapsed
		a.lastMajor, a.lastStall, a.readRound, a.readAt = c.major, c.stallNS, s.round, now
	}
	for pid := range s.activity {
		if !seen[pid] {
			delete(s.activity, pid) // exited: the probe dropped it
		}
	}
	return byPID
}

// rank is the top-K active processes, busiest first, then the pinned ones.
func (s *Sampler) rank(pinned []int) []int {
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
	for _, pid := range pinned {
		if !slices.Contains(ranked, pid) {
			ranked = append(ranked, pid)
		}
	}
	return ranked
}

// processes reads each ranked process and puts its counters with it; one
// that exited since is left out.
func (s *Sampler) processes(ranked []int, byPID map[int]candidate) []Process {
	defer s.files.Sweep()
	out := make([]Process, 0, len(ranked))
	for _, pid := range ranked {
		p, err := s.cfg.ProcFS.ProcessFrom(&s.files, pid)
		if err != nil {
			continue // exited since: its series goes away
		}
		tp := Process{Process: p}
		if c, ok := byPID[pid]; ok {
			tp.MajorFaults = c.kinds
			tp.Stall, tp.HasStall = c.stall, c.hasStall
		} else if s.cfg.Probe == nil {
			tp.MajorFaults[readout.Unknown] = p.MajorFaults
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
