package probe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// perfEvents are per-CPU software perf events a program hangs off: the
// PAGE_FAULTS_MAJ events of major_fault, whose own counts are read back to
// find events the program never saw (the kernel skips a BPF program that
// would nest in another), and the CPU-clock events of memory_stall_sample.
type perfEvents struct {
	name string
	fds  []int
	// ioctl: the program is attached by PERF_EVENT_IOC_SET_BPF (no BPF
	// links for perf events before 5.15): closing the events detaches it.
	ioctl bool
}

// perfEventLinks: attach by BPF link first. A test clears it to take the
// ioctl path of kernels before 5.15 on this one.
var perfEventLinks = true

// perfEvent is the kind of software event to open on each CPU.
type perfEvent struct {
	name   string // for errors, e.g. "PAGE_FAULTS_MAJ"
	config uint64 // PERF_COUNT_SW_*
	period uint64 // events (or ns, for a clock) between runs of the program
}

// attachPerfEvents opens a system-wide software event on each CPU and
// attaches prog to each: by a BPF link, or on kernels before 5.15, which
// have no perf-event links, by the event's PERF_EVENT_IOC_SET_BPF, undone
// when the event is closed. The events start disabled; they are enabled
// once all are attached unless enable is false.
func attachPerfEvents(cpus []int, ev perfEvent, prog *ebpf.Program, enable bool) (*perfEvents, []link.Link, error) {
	pe := &perfEvents{name: ev.name, ioctl: !perfEventLinks}
	var links []link.Link
	fail := func(err error) (*perfEvents, []link.Link, error) {
		for _, l := range links {
			l.Close()
		}
		pe.Close()
		return nil, nil, err
	}
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: ev.config,
			Size:   uint32(binary.Size(unix.PerfEventAttr{})),
			Sample: ev.period,
			Bits:   unix.PerfBitDisabled,
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
				if denied := deniedBy(); denied != nil {
					err = fmt.Errorf("%w: %w", err, denied)
				} else {
					err = fmt.Errorf("%w: run as root or grant CAP_PERFMON", err)
				}
			}
			return fail(fmt.Errorf("opening perf event %s on CPU %d: %w", ev.name, cpu, err))
		}
		pe.fds = append(pe.fds, fd)
		if !pe.ioctl {
			l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
			switch {
			case err == nil:
				links = append(links, l)
				continue
			case len(links) == 0 && (errors.Is(err, unix.EINVAL) || errors.Is(err, ebpf.ErrNotSupported)):
				pe.ioctl = true
			default:
				return fail(fmt.Errorf("attaching to perf event %s on CPU %d: %w", ev.name, cpu, err))
			}
		}
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
			return fail(fmt.Errorf("attaching to perf event %s on CPU %d (PERF_EVENT_IOC_SET_BPF: this kernel has no perf-event BPF links): %w", ev.name, cpu, err))
		}
	}
	if enable {
		if err := pe.setEnabled(true); err != nil {
			return fail(err)
		}
	}
	return pe, links, nil
}

// setEnabled starts or stops the events on every CPU. A stopped CPU-clock
// event arms no timer.
func (pe *perfEvents) setEnabled(on bool) error {
	req, verb := uint(unix.PERF_EVENT_IOC_DISABLE), "disabling"
	if on {
		req, verb = unix.PERF_EVENT_IOC_ENABLE, "enabling"
	}
	for i, fd := range pe.fds {
		if err := unix.IoctlSetInt(fd, req, 0); err != nil {
			return fmt.Errorf("%s perf event %s (%d of %d): %w", verb, pe.name, i+1, len(pe.fds), err)
		}
	}
	return nil
}

// Count sums the events' own counters over every CPU.
func (pe *perfEvents) Count() (uint64, error) {
	var total uint64
	buf := make([]byte, 8)
	for _, fd := range pe.fds {
		if _, err := unix.Read(fd, buf); err != nil {
			return 0, fmt.Errorf("reading perf event count: %w", err)
		}
		total += binary.NativeEndian.Uint64(buf)
	}
	return total, nil
}

func (pe *perfEvents) Close() error {
	var errs []error
	for _, fd := range pe.fds {
		errs = append(errs, unix.Close(fd))
	}
	pe.fds = nil
	return errors.Join(errs...)
}

func onlineCPUs(sysfs string) ([]int, error) {
	path := sysfs + "/devices/system/cpu/online"
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading online CPUs: %w; check --path.sysfs", err)
	}
	cpus, err := parseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return cpus, nil
}

// parseCPUList parses the kernel's CPU list format, e.g. "0-3,8,10-11".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("bad CPU list %q", s)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first {
				return nil, fmt.Errorf("bad CPU list %q", s)
			}
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
