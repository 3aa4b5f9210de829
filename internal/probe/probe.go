// Package probe is thrashscope's kernel side in Go: it loads the BPF programs
// of bpf/ (thrashscope.bpf.c, one included file per probe), attaches each
// one, and reads their maps every sample interval. It is the first stage of the data flow; what it reads goes
// on to the sampler, the indicators and the metrics.
//
// The layers are kept apart: probe.go loads and attaches, read.go reads the
// maps (Read) and arms the on-demand hooks for what it read (Arm, a step
// of its own: a read attaches nothing), decode.go turns raw map values into
// counters with pure functions;
// the counters' types are package readout's.
package probe

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"golang.org/x/sys/unix"
)

// ErrUnavailable wraps every reason the BPF objects could not be loaded at all.
var ErrUnavailable = errors.New("BPF probes unavailable")

// Options configure Load.
type Options struct {
	SysfsPath string // root of sysfs, for the online CPU list and kernel BTF
	Logger    *slog.Logger
	// Calm is how long without a major fault (for the fault-entry hooks)
	// or a memory stall (for the stall samples) before those on-demand
	// hooks are turned off again; zero means DefaultCalm, and a negative
	// value keeps them on, so that every fault is timed and every stall
	// sampled.
	Calm time.Duration
	// StallSamplePeriod is the CPU-clock period of the stall samples; zero
	// means DefaultStallSamplePeriod.
	StallSamplePeriod time.Duration
	// Cgroups counts faults and stalls per cgroup too (the cgroups map),
	// for the workloads' series.
	Cgroups bool
	// WakeGap, when positive, has the programs wake the sampler (Wakes)
	// when memory trouble begins, at most once per gap.
	WakeGap time.Duration
	// Way is the programs' way; "" or WayAuto takes the fast way where
	// the kernel offers what it needs.
	Way Way
}

// DefaultCalm keeps the on-demand hooks through the lulls of a thrash, and
// drops them soon after it ends.
const DefaultCalm = 30 * time.Second

// DefaultStallSamplePeriod samples stalled CPUs at 1 kHz while stalls occur:
// over 1 s of sampled stall the standard error is about 32 ms, 3 %.
const DefaultStallSamplePeriod = time.Millisecond

// loadGCPercent is GOGC while the probes load: the garbage of decoding BTF
// is collected when the heap has grown a fifth, not doubled.
const loadGCPercent = 20

// Probe holds the loaded objects and their links. Close releases them in
// reverse order: links, perf events, then objects.
type Probe struct {
	objs  thrashscopeObjects
	links []link.Link
	// rmdirHooked: removed cgroups hand their last counts over through
	// removed_cgroups (cgroup_rmdir).
	rmdirHooked bool
	perf        *perfEvents // PAGE_FAULTS_MAJ
	status      []readout.Status
	reading     readState
	latency     latencyHooks
	sampling    stallSampling
	logger      *slog.Logger
	// filemap: mm_filemap_fault is attached, so a swap-in of a private
	// file mapping's written page is told from a page-cache read.
	filemap bool
	// cgroups: the programs count per cgroup too.
	cgroups bool
	// forgotten: removed cgroups, until no CPU's slot holds them.
	forgotten forgottenCgroups
	wake      wakeReader
	// notLoaded are the BPF objects this kernel refused, with why.
	notLoaded map[string]error
	// way is the programs' way, and why: what the kernel lacks for the
	// fast one, or that it was asked for.
	way    Way
	wayWhy string
}

// Way reports the programs' way, and why it was taken.
func (p *Probe) Way() (Way, string) { return p.way, p.wayWhy }

// loaded says whether the program name loaded, or why it did not.
func (p *Probe) loaded(name string, prog *ebpf.Program) error {
	if prog != nil {
		return nil
	}
	if err := p.notLoaded[name]; err != nil {
		return fmt.Errorf("program %s did not load on this kernel: %w", name, err)
	}
	return fmt.Errorf("program %s did not load", name)
}

// describeFailed names the objects that did not load, with why.
func describeFailed(failed map[string]error) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(failed)) {
		parts = append(parts, name+": "+failed[name].Error())
	}
	return strings.Join(parts, "; ")
}

// FileKindsExact reports whether a fault in a private file mapping is
// counted as what it read (page cache: file; a written page back from
// swap: anon); without mm_filemap_fault (before Linux 6.10) both are file.
func (p *Probe) FileKindsExact() bool { return p.filemap }

// Load loads the BPF objects and attaches every program. It fails only when
// nothing can be loaded; a program that fails to attach is reported in
// Status and the rest keep working.
func Load(opts Options) (*Probe, error) {
	opts.fillDefaults()
	// Loading decodes the kernel's BTF and the objects: megabytes of
	// garbage within milliseconds, which at the usual GC pace would set the
	// daemon's peak RSS for good. Collect often while it lasts, and give
	// the memory back once the programs are in the kernel.
	defer debug.FreeOSMemory()
	defer debug.SetGCPercent(debug.SetGCPercent(loadGCPercent))
	kernel, err := kernelBTF(opts.SysfsPath)
	if err != nil {
		return nil, err
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		if denied := deniedBy(); denied != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, denied)
		}
		return nil, fmt.Errorf("%w: raising the memlock limit: %w; run as root, or grant CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE, or use --probes=procfs", ErrUnavailable, err)
	}

	way, why, err := chooseWay(opts.Way, fastNeeds)
	if err != nil {
		if denied := deniedBy(); denied != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, denied)
		}
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	p := &Probe{
		logger:   opts.Logger,
		latency:  latencyHooks{calm: opts.Calm},
		sampling: stallSampling{calm: opts.Calm},
		way:      way,
		wayWhy:   why,
	}
	opts.Logger.Info("BPF programs", "way", way, "why", why)
	failed, err := loadObjects(&p.objs, kernel, way)
	if err != nil {
		if denied := deniedBy(); denied != nil {
			return nil, fmt.Errorf("%w: loading objects: %w", ErrUnavailable, denied)
		}
		return nil, fmt.Errorf("%w: loading objects: %w (%s)", ErrUnavailable, err, describeFailed(failed))
	}
	p.notLoaded = failed
	for name, err := range failed {
		opts.Logger.Warn("a BPF object this kernel does not take; the probes that need it are down", "object", name, "err", err)
	}
	if opts.Cgroups {
		p.startCgroups()
	}
	if opts.WakeGap > 0 {
		p.startWakes(opts.WakeGap)
	}

	if err := p.attach(opts); err != nil {
		return nil, err
	}
	return p, nil
}

// fillDefaults gives the options left out their defaults.
func (opts *Options) fillDefaults() {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.SysfsPath == "" {
		opts.SysfsPath = "/sys"
	}
	if opts.Calm == 0 {
		opts.Calm = DefaultCalm
	}
	if opts.StallSamplePeriod <= 0 {
		opts.StallSamplePeriod = DefaultStallSamplePeriod
	}
}

// attach attaches every probe, records each one's status, and leaves the
// on-demand hooks waiting for their first use.
func (p *Probe) attach(opts Options) error {
	cpus, cpuErr := onlineCPUs(opts.SysfsPath)
	p.status = append(p.status,
		p.attachMajorFaults(cpus, cpuErr),
		p.attachMemoryStall(),
		p.attachStallSampling(cpus, cpuErr, opts.StallSamplePeriod),
		p.armLatency(time.Now()),
		p.attachRawTracepoint(readout.ProcessExit, "sched_process_exit", "process_exit", p.objs.ProcessExit),
	)
	// The fault-entry hooks attached once to prove they can; they wait
	// detached until the first read that sees a major fault. The stall
	// samples likewise wait stopped for the first stall.
	if p.latency.armed() && opts.Calm > 0 {
		if err := p.disarmLatency(); err != nil {
			return errors.Join(fmt.Errorf("%w: %w", ErrUnavailable, err), p.Close())
		}
	}
	if opts.Calm < 0 {
		if err := p.sampling.start(time.Now()); err != nil {
			opts.Logger.Error("stall samples failed to start", "err", err)
		}
	}
	for i, st := range p.status {
		p.status[i] = p.withWay(st)
		if st.Err != nil {
			opts.Logger.Error("probe failed to attach", "probe", st.Name, "err", st.Err)
		}
	}
	return nil
}

// startCgroups turns the per-cgroup counters on, where the kernel took
// their map.
func (p *Probe) startCgroups() {
	if p.objs.Cgroups == nil || p.objs.CgroupsPending == nil || p.objs.CgroupsOn == nil {
		p.logger.Warn("no per-cgroup counters: this kernel did not take the cgroups map", "err", p.notLoaded["cgroups"])
		return
	}
	if err := p.objs.CgroupsOn.Set(uint32(1)); err != nil {
		p.logger.Warn("no per-cgroup counters", "err", err)
		return
	}
	p.cgroups = true
	// A removed cgroup leaves the map as the kernel removes it; without
	// the hook it goes at the reader's next sweep (every tenth sample).
	if p.objs.CgroupRmdir == nil || p.objs.RemovedCgroups == nil {
		p.logger.Warn("removed cgroups leave the cgroup map only at the workloads' sweep: this kernel did not take the cgroup_rmdir program", "err", errors.Join(p.notLoaded["cgroup_rmdir"], p.notLoaded["removed_cgroups"]))
		return
	}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "cgroup_rmdir", Program: p.objs.CgroupRmdir})
	if err != nil {
		p.logger.Warn("removed cgroups leave the cgroup map only at the workloads' sweep", "err", fmt.Errorf("attaching raw tracepoint cgroup_rmdir: %w", err))
		return
	}
	p.links = append(p.links, l)
	p.rmdirHooked = true
}

// Cgroups reports whether faults and stalls are counted per cgroup.
func (p *Probe) Cgroups() bool { return p.cgroups }

func (p *Probe) attachRawTracepoint(name, tracepoint, progName string, prog *ebpf.Program) readout.Status {
	st := readout.Status{Name: name, Required: true, Detail: "raw_tp/" + tracepoint}
	if st.Err = p.loaded(progName, prog); st.Err != nil {
		return st
	}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tracepoint, Program: prog})
	if err != nil {
		st.Err = fmt.Errorf("attaching raw tracepoint %s: %w", tracepoint, err)
		return st
	}
	p.links = append(p.links, l)
	st.Attached = true
	return st
}

// withWay is st saying the programs' way, and the oldest Linux it loads on.
func (p *Probe) withWay(st readout.Status) readout.Status {
	st.Way, st.Since = string(p.way), since[p.way][st.Name]
	return st
}

func (p *Probe) setStatus(st readout.Status) {
	st = p.withWay(st)
	for i := range p.status {
		if p.status[i].Name == st.Name {
			p.status[i] = st
			return
		}
	}
	p.status = append(p.status, st)
}

// attachMajorFaults attaches major_fault to PAGE_FAULTS_MAJ on every CPU,
// and filemap_fault, which tells page-cache reads from the anonymous pages
// of private file mappings. Without the latter (kernels before 6.10) the
// probe still counts every fault.
func (p *Probe) attachMajorFaults(cpus []int, cpuErr error) readout.Status {
	st := readout.Status{Name: readout.MajorFaults, Required: true, Detail: "perf_event/PAGE_FAULTS_MAJ"}
	if cpuErr != nil {
		st.Err = cpuErr
		return st
	}
	if st.Err = p.loaded("major_fault", p.objs.MajorFault); st.Err != nil {
		return st
	}
	pe, links, err := attachPerfEvents(cpus, perfEvent{name: "PAGE_FAULTS_MAJ", config: unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ, period: 1}, p.objs.MajorFault, true)
	if err != nil {
		st.Err = err
		return st
	}
	p.perf = pe
	p.links = append(p.links, links...)
	st.Attached = true
	st.Detail = fmt.Sprintf("perf_event/PAGE_FAULTS_MAJ on %d CPUs, raw_tp/mm_filemap_fault", len(cpus))
	err = p.loaded("filemap_fault", p.objs.FilemapFault)
	var l link.Link
	if err == nil {
		l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "mm_filemap_fault", Program: p.objs.FilemapFault})
	}
	if err == nil {
		err = p.objs.FilemapHooked.Set(uint32(1))
		if err != nil {
			l.Close()
		}
	}
	if err != nil {
		st.Detail = fmt.Sprintf("perf_event/PAGE_FAULTS_MAJ on %d CPUs; no raw_tp/mm_filemap_fault (%v, Linux 6.10+): faults in private file mappings count as file, swapped-in written pages there too", len(cpus), err)
		p.logger.Warn("fault kinds are coarser on this kernel", "detail", st.Detail)
		return st
	}
	p.links = append(p.links, l)
	p.filemap = true
	return st
}

// reclaimTracepoints bracket direct and memcg reclaim, which the kernel
// runs inside a memory stall.
var reclaimTracepoints = []string{
	"mm_vmscan_direct_reclaim_begin", "mm_vmscan_direct_reclaim_end",
	"mm_vmscan_memcg_reclaim_begin", "mm_vmscan_memcg_reclaim_end",
}

// attachMemoryStall attaches the exact parts of the stall: sched_switch
// (required) and the reclaim windows. Without the windows, reclaim on CPU
// is still counted, by the samples.
func (p *Probe) attachMemoryStall() readout.Status {
	st := p.attachRawTracepoint(readout.MemoryStall, "sched_switch", "memory_stall", p.objs.MemoryStall)
	if !st.Attached {
		return st
	}
	progs := []*ebpf.Program{p.objs.ReclaimBeginDirect, p.objs.ReclaimEndDirect, p.objs.ReclaimBeginMemcg, p.objs.ReclaimEndMemcg}
	names := []string{"reclaim_begin_direct", "reclaim_end_direct", "reclaim_begin_memcg", "reclaim_end_memcg"}
	var missing []string
	for i, tp := range reclaimTracepoints {
		err := p.loaded(names[i], progs[i])
		var l link.Link
		if err == nil {
			l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: progs[i]})
		}
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s: %v", tp, err))
			continue
		}
		p.links = append(p.links, l)
	}
	st.Detail = "raw_tp/sched_switch, raw_tp/mm_vmscan_{direct,memcg}_reclaim_{begin,end}"
	if len(missing) > 0 {
		st.Detail = "raw_tp/sched_switch; reclaim sampled, not timed: " + strings.Join(missing, "; ")
		p.logger.Warn("reclaim stalls are sampled on this kernel", "detail", st.Detail)
	}
	return st
}

// attachStallSampling opens a CPU-clock event on every CPU for
// memory_stall_sample, stopped until stalls occur.
func (p *Probe) attachStallSampling(cpus []int, cpuErr error, period time.Duration) readout.Status {
	st := readout.Status{Name: readout.MemoryStallSample, Detail: fmt.Sprintf("perf_event/CPU_CLOCK every %v while memory stalls occur", period)}
	if cpuErr != nil {
		st.Err = cpuErr
		return st
	}
	err := p.loaded("memory_stall_sample", p.objs.MemoryStallSample)
	var pe *perfEvents
	var links []link.Link
	if err == nil {
		pe, links, err = attachPerfEvents(cpus, perfEvent{name: "CPU_CLOCK", config: unix.PERF_COUNT_SW_CPU_CLOCK, period: uint64(period.Nanoseconds())}, p.objs.MemoryStallSample, false)
	}
	if err != nil {
		st.Err = fmt.Errorf("%w; on-CPU stall outside reclaim goes uncounted", err)
		return st
	}
	p.links = append(p.links, links...)
	p.sampling.events = pe
	st.Attached = true
	st.Detail = fmt.Sprintf("perf_event/CPU_CLOCK on %d CPUs every %v while memory stalls occur", len(cpus), period)
	return st
}

// Status reports every probe's attach result, in Names order.
func (p *Probe) Status() []readout.Status {
	out := make([]readout.Status, 0, len(readout.Names))
	for _, name := range readout.Names {
		for _, st := range p.status {
			if st.Name == name {
				out = append(out, st)
				break
			}
		}
	}
	return out
}

// Close detaches every program and frees the objects.
func (p *Probe) Close() error {
	var errs []error
	p.wake.close()
	errs = append(errs, p.latency.detach())
	for i := len(p.links) - 1; i >= 0; i-- {
		errs = append(errs, p.links[i].Close())
	}
	p.links = nil
	if p.perf != nil {
		errs = append(errs, p.perf.Close())
		p.perf = nil
	}
	if p.sampling.events != nil {
		errs = append(errs, p.sampling.events.Close())
		p.sampling.events = nil
	}
	errs = append(errs, p.objs.Close())
	return errors.Join(errs...)
}

// WriteWay prints the programs' way and why, for --check.
func (p *Probe) WriteWay(w io.Writer) {
	fmt.Fprintf(w, "BPF programs: the %s way, %s.\n", p.way, p.wayWhy)
}

// WriteStatusTable prints the probes as a table, for --check.
func WriteStatusTable(w io.Writer, statuses []readout.Status) {
	fmt.Fprintf(w, "%-19s %-8s %-9s %-8s %-6s %s\n", "PROBE", "STATUS", "REQUIRED", "WAY", "SINCE", "DETAIL")
	for _, st := range statuses {
		state, detail := "up", st.Detail
		if !st.Attached {
			state = "FAILED"
			if st.Err != nil {
				detail = st.Err.Error()
			}
		}
		fmt.Fprintf(w, "%-19s %-8s %-9t %-8s %-6s %s\n", st.Name, state, st.Required, st.Way, st.Since+"+", detail)
	}
}

// kernelBTF reads the kernel's BTF once, for every program's CO-RE
// relocations: a collection left to find it itself decodes it again, and
// each program loaded apart (a kernel that refused one) once more. It is
// dropped once the programs are loaded.
func kernelBTF(sysfs string) (*btf.Spec, error) {
	path := sysfs + "/kernel/btf/vmlinux"
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: kernel BTF not found at %s (%w): use a kernel built with CONFIG_DEBUG_INFO_BTF=y, or run with --probes=procfs", ErrUnavailable, path, err)
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("%w: reading kernel BTF: %w", ErrUnavailable, err)
	}
	return spec, nil
}

func explainLoadError(err error) error {
	var ve *ebpf.VerifierError
	switch {
	case errors.As(err, &ve):
		// The last lines of the log say why; the whole log is noise here.
		lines := ve.Log
		if len(lines) > 3 {
			lines = lines[len(lines)-3:]
		}
		return fmt.Errorf("%w (verifier: %s)", err, strings.Join(lines, "; "))
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%w: run as root, or grant CAP_BPF and CAP_PERFMON (and CAP_SYS_RESOURCE on kernels before 5.11, which charge BPF memory to memlock)", err)
	}
	return err
}
