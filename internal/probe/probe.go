// Package probe is thrashscope's kernel side in Go: it loads the BPF programs
// of bpf/thrashscope.bpf.c, attaches each one, and reads their maps every
// sample interval. It is the first stage of the data flow; what it reads goes
// on to the sampler, the indicators and the metrics.
//
// The layers are kept apart: probe.go loads and attaches, read.go reads the
// maps, decode.go turns raw map values into counters with pure functions.
package probe

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// Probe names, as in thrashscope_probe_up{probe}.
const (
	MajorFaults  = "major_faults"  // perf event PAGE_FAULTS_MAJ, per tgid, anon/file
	MemoryStall  = "memory_stall"  // raw_tp sched_switch, off-CPU time in in_memstall
	FaultLatency = "fault_latency" // raw_tp page_fault_user/kernel, the start of each fault, while major faults occur
	ProcessExit  = "process_exit"  // raw_tp sched_process_exit, map cleanup
)

// Names lists every probe in the order of the BPF probe_id enum.
var Names = []string{MajorFaults, MemoryStall, FaultLatency, ProcessExit}

// ErrUnavailable wraps every reason the BPF objects could not be loaded at all.
var ErrUnavailable = errors.New("BPF probes unavailable")

// Status is one probe's attach result.
type Status struct {
	Name     string
	Attached bool
	Required bool
	Detail   string // what it is attached to
	Err      error
}

// Options configure Load.
type Options struct {
	SysfsPath string // root of sysfs, for the online CPU list and kernel BTF
	Logger    *slog.Logger
	// LatencyCalm is how long without a major fault before the fault-entry
	// hooks are detached again; zero means DefaultLatencyCalm, and a
	// negative value keeps them attached, so that every fault is timed.
	LatencyCalm time.Duration
}

// DefaultLatencyCalm keeps the fault-entry hooks through the lulls of a
// thrash, and drops them soon after it ends.
const DefaultLatencyCalm = 30 * time.Second

// Probe holds the loaded objects and their links. Close releases them in
// reverse order: links, perf events, then objects.
type Probe struct {
	objs    thrashscopeObjects
	links   []link.Link
	perf    *perfEvents
	status  []Status
	reading readState
	latency latencyHooks
	logger  *slog.Logger
}

// Load loads the BPF objects and attaches every program. It fails only when
// nothing can be loaded; a program that fails to attach is reported in
// Status and the rest keep working.
func Load(opts Options) (*Probe, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.SysfsPath == "" {
		opts.SysfsPath = "/sys"
	}
	if err := checkKernelBTF(opts.SysfsPath); err != nil {
		return nil, err
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("%w: raising the memlock limit: %w; run as root, or grant CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE, or use --probes=procfs", ErrUnavailable, err)
	}

	if opts.LatencyCalm == 0 {
		opts.LatencyCalm = DefaultLatencyCalm
	}
	p := &Probe{logger: opts.Logger, latency: latencyHooks{calm: opts.LatencyCalm}}
	if err := loadThrashscopeObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("%w: loading objects: %w", ErrUnavailable, explainLoadError(err))
	}

	p.status = append(p.status, p.attachMajorFaults(opts.SysfsPath))
	p.status = append(p.status,
		p.attachRawTracepoint(MemoryStall, "sched_switch", p.objs.MemoryStall),
		p.armLatency(time.Now()),
		p.attachRawTracepoint(ProcessExit, "sched_process_exit", p.objs.ProcessExit),
	)
	// The fault-entry hooks attached once to prove they can; they wait
	// detached until the first read that sees a major fault.
	if p.latency.armed() && opts.LatencyCalm > 0 {
		if err := p.disarmLatency(); err != nil {
			return nil, errors.Join(fmt.Errorf("%w: %w", ErrUnavailable, err), p.Close())
		}
	}
	for _, st := range p.status {
		if st.Err != nil {
			opts.Logger.Error("probe failed to attach", "probe", st.Name, "err", st.Err)
		}
	}
	return p, nil
}

func (p *Probe) attachRawTracepoint(name, tracepoint string, prog *ebpf.Program) Status {
	st := Status{Name: name, Required: true, Detail: "raw_tp/" + tracepoint}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tracepoint, Program: prog})
	if err != nil {
		st.Err = fmt.Errorf("attaching raw tracepoint %s: %w", tracepoint, err)
		return st
	}
	p.links = append(p.links, l)
	st.Attached = true
	return st
}

func (p *Probe) setStatus(st Status) {
	for i := range p.status {
		if p.status[i].Name == st.Name {
			p.status[i] = st
			return
		}
	}
	p.status = append(p.status, st)
}

func (p *Probe) attachMajorFaults(sysfs string) Status {
	st := Status{Name: MajorFaults, Required: true, Detail: "perf_event/PAGE_FAULTS_MAJ"}
	cpus, err := onlineCPUs(sysfs)
	if err != nil {
		st.Err = err
		return st
	}
	pe, links, err := attachPerfEvents(cpus, p.objs.MajorFault)
	if err != nil {
		st.Err = err
		return st
	}
	p.perf = pe
	p.links = append(p.links, links...)
	st.Attached = true
	st.Detail = fmt.Sprintf("perf_event/PAGE_FAULTS_MAJ on %d CPUs", len(cpus))
	return st
}

// Status reports every probe's attach result, in Names order.
func (p *Probe) Status() []Status {
	out := make([]Status, 0, len(Names))
	for _, name := range Names {
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
	errs = append(errs, p.latency.detach())
	for i := len(p.links) - 1; i >= 0; i-- {
		errs = append(errs, p.links[i].Close())
	}
	p.links = nil
	if p.perf != nil {
		errs = append(errs, p.perf.Close())
		p.perf = nil
	}
	errs = append(errs, p.objs.Close())
	return errors.Join(errs...)
}

// WriteStatusTable prints the probes as a table, for --check.
func WriteStatusTable(w io.Writer, statuses []Status) {
	fmt.Fprintf(w, "%-14s %-8s %-9s %s\n", "PROBE", "STATUS", "REQUIRED", "DETAIL")
	for _, st := range statuses {
		state, detail := "up", st.Detail
		if !st.Attached {
			state = "FAILED"
			if st.Err != nil {
				detail = st.Err.Error()
			}
		}
		fmt.Fprintf(w, "%-14s %-8s %-9t %s\n", st.Name, state, st.Required, detail)
	}
}

func checkKernelBTF(sysfs string) error {
	path := sysfs + "/kernel/btf/vmlinux"
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%w: kernel BTF not found at %s (%w): use a kernel built with CONFIG_DEBUG_INFO_BTF=y, or run with --probes=procfs", ErrUnavailable, path, err)
	}
	if _, err := btf.LoadKernelSpec(); err != nil {
		return fmt.Errorf("%w: reading kernel BTF: %w", ErrUnavailable, err)
	}
	return nil
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
