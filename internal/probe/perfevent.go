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

// perfEvents are the per-CPU PAGE_FAULTS_MAJ events the major_fault program
// hangs off. Their own counts are read back to find events the program
// never saw (the kernel skips a BPF program that would nest in another).
type perfEvents struct {
	fds []int
}

// attachPerfEvents opens a system-wide PAGE_FAULTS_MAJ event on each CPU with
// sample period 1, so every major fault runs prog, and attaches prog by a
// BPF link. Events start disabled and are enabled once attached.
func attachPerfEvents(cpus []int, prog *ebpf.Program) (*perfEvents, []link.Link, error) {
	pe := &perfEvents{}
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
			Config: unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ,
			Size:   uint32(binary.Size(unix.PerfEventAttr{})),
			Sample: 1,
			Bits:   unix.PerfBitDisabled,
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
				err = fmt.Errorf("%w: run as root or grant CAP_PERFMON", err)
			}
			return fail(fmt.Errorf("opening perf event PAGE_FAULTS_MAJ on CPU %d: %w", cpu, err))
		}
		pe.fds = append(pe.fds, fd)
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: prog, Attach: ebpf.AttachPerfEvent})
		if err != nil {
			return fail(fmt.Errorf("attaching to perf event on CPU %d: %w", cpu, err))
		}
		links = append(links, l)
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return fail(fmt.Errorf("enabling perf event on CPU %d: %w", cpu, err))
		}
	}
	return pe, links, nil
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
