package procfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"syscall"

	promprocfs "github.com/prometheus/procfs"
)

// userHZ is the unit of the tick fields in /proc/<pid>/stat. It is 100 on
// every architecture Linux exports to userspace; prometheus/procfs assumes
// the same, and reading sysconf(_SC_CLK_TCK) would need cgo.
const userHZ = 100

// Process is a snapshot of one process's counters.
type Process struct {
	PID  int
	Comm string
	// StartTicks is the start time in ticks since boot; with PID it tells a
	// reused pid apart.
	StartTicks                 uint64
	MinorFaults, MajorFaults   uint64
	UserSeconds, SystemSeconds float64
	ResidentBytes              uint64
	VirtualBytes               uint64
	// SwapBytes is filled only by Process, as it needs /proc/<pid>/status.
	SwapBytes uint64
}

// ProcessStat reads /proc/<pid>/stat only, cheap enough to scan every
// process each interval.
func (fs FS) ProcessStat(pid int) (Process, error) {
	p, err := fs.proc.Proc(pid)
	if err != nil {
		return Process{}, processErr(pid, "", err)
	}
	return processStat(p)
}

// Process reads /proc/<pid>/stat and /proc/<pid>/status.
func (fs FS) Process(pid int) (Process, error) {
	p, err := fs.proc.Proc(pid)
	if err != nil {
		return Process{}, processErr(pid, "", err)
	}
	proc, err := processStat(p)
	if err != nil {
		return Process{}, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return Process{}, processErr(pid, "status", err)
	}
	// The kernel always writes Name first, so without it the read was empty.
	if st.Name == "" {
		return Process{}, processErr(pid, "status", io.ErrUnexpectedEOF)
	}
	// Kernel threads have no VmSwap line and keep 0.
	proc.SwapBytes = st.VmSwap
	return proc, nil
}

func processStat(p promprocfs.Proc) (Process, error) {
	st, err := readStat(p)
	if err != nil {
		return Process{}, processErr(p.PID, "stat", err)
	}
	return Process{
		PID:           p.PID,
		Comm:          st.Comm,
		StartTicks:    st.Starttime,
		MinorFaults:   uint64(st.MinFlt),
		MajorFaults:   uint64(st.MajFlt),
		UserSeconds:   float64(st.UTime) / userHZ,
		SystemSeconds: float64(st.STime) / userHZ,
		ResidentBytes: uint64(max(st.ResidentMemory(), 0)),
		VirtualBytes:  uint64(st.VirtualMemory()),
	}, nil
}

// PIDs lists every numeric entry under the mount, sorted.
func (fs FS) PIDs() ([]int, error) {
	d, err := os.Open(fs.path)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("listing processes in %s: %w", fs.path, err)
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// readStat calls Proc.Stat and turns its panic into an error:
// prometheus/procfs v0.23.0 slices past the end of a stat that is cut right
// after the comm, and a scan of every process must survive that.
func readStat(p promprocfs.Proc) (st promprocfs.ProcStat, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("truncated stat: %v: %w", r, io.ErrUnexpectedEOF)
		}
	}()
	return p.Stat()
}

// processErr wraps err with ErrProcessGone when it shows the process
// vanished: the directory or file went away (ENOENT), the task was reaped
// after open (ESRCH), or the read came back empty or cut short. Only other
// errors are reported as failures.
func processErr(pid int, file string, err error) error {
	if vanished(err) {
		return fmt.Errorf("pid %d: %w", pid, ErrProcessGone)
	}
	if file == "" {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	return fmt.Errorf("pid %d: reading %s: %w", pid, file, err)
}

func vanished(err error) bool {
	return errors.Is(err, os.ErrNotExist) ||
		errors.Is(err, syscall.ESRCH) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		// Proc.Stat's only ErrFileParse is a missing "(comm)", which the
		// kernel always writes: the read was empty or cut short.
		errors.Is(err, promprocfs.ErrFileParse)
}
