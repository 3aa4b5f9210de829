package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	promprocfs "github.com/prometheus/procfs"

	"github.com/thrashscope/thrashscope/internal/kernfile"
)

// userHZ is the unit of the tick fields in /proc/<pid>/stat. It is 100 on
// every architecture Linux exports to userspace; prometheus/procfs assumes
// the same, and reading sysconf(_SC_CLK_TCK) would need cgo.
const userHZ = 100

// UserHZ is userHZ for other packages: a tick field over it is seconds.
const UserHZ = userHZ

// Process is a snapshot of one process's counters.
type Process struct {
	PID  int
	Comm string
	// State is the one-letter state: R running, S sleeping, D in
	// uninterruptible wait, T stopped by a signal, t stopped by a tracer,
	// Z zombie, ...
	State byte
	// StartTicks is the start time in ticks since boot; with PID it tells a
	// reused pid apart.
	StartTicks                 uint64
	MinorFaults, MajorFaults   uint64
	UserSeconds, SystemSeconds float64
	ResidentBytes              uint64
	VirtualBytes               uint64
	// SwapBytes is filled only by Process, as it needs /proc/<pid>/status.
	SwapBytes uint64
	// OwnResidentBytes is the resident memory that is the process's own,
	// anonymous and shared memory (RssAnon + RssShmem, status): its
	// resident file pages, its binary's text among them, are shared with
	// every process that maps the file. Filled only by Process.
	OwnResidentBytes uint64
}

// ProcessStat reads /proc/<pid>/stat only, cheap enough to scan every
// process each interval.
func (fs FS) ProcessStat(pid int) (Process, error) {
	var buf [statBufSize]byte
	b, err := readSmall(fs.pidFile(pid, "stat"), buf[:])
	return statOf(pid, b, err)
}

// ProcessStatFrom is ProcessStat read through files, which keeps the stat
// file open from one reading to the next (see ProcessFrom).
func (fs FS) ProcessStatFrom(files *kernfile.Set, pid int) (Process, error) {
	b, err := files.ReadFile(fs.pidFile(pid, "stat"))
	return statOf(pid, b, err)
}

// statOf is process pid from its stat, b, as read with err.
func statOf(pid int, b []byte, err error) (Process, error) {
	if err != nil {
		return Process{}, processErr(pid, "", err)
	}
	p, err := parseStat(b)
	if err != nil {
		return Process{}, processErr(pid, "stat", err)
	}
	p.PID = pid
	return p, nil
}

// Process reads /proc/<pid>/stat and /proc/<pid>/status.
func (fs FS) Process(pid int) (Process, error) {
	proc, err := fs.ProcessStat(pid)
	if err != nil {
		return Process{}, err
	}
	var buf [statusBufSize]byte
	b, err := readSmall(fs.pidFile(pid, "status"), buf[:])
	if err != nil {
		return Process{}, processErr(pid, "status", err)
	}
	return withStatus(proc, b)
}

// ProcessFrom is Process read through files, which keeps a process's
// files open from one reading to the next: a process read every sample
// (a ranked one, a run's consumer) costs a pread of each instead of an
// open, a read and a close. A kept file of an exited process fails its
// read and is opened afresh, so a reused pid reads the new process.
func (fs FS) ProcessFrom(files *kernfile.Set, pid int) (Process, error) {
	b, err := files.ReadFile(fs.pidFile(pid, "stat"))
	proc, err := statOf(pid, b, err)
	if err != nil {
		return Process{}, err
	}
	if b, err = files.ReadFile(fs.pidFile(pid, "status")); err != nil {
		return Process{}, processErr(pid, "status", err)
	}
	return withStatus(proc, b)
}

// withStatus adds what /proc/<pid>/status holds, b, to proc.
func withStatus(proc Process, b []byte) (Process, error) {
	pid := proc.PID
	var err error
	// The kernel always writes Name first, so without it the read was empty.
	if !bytes.HasPrefix(b, []byte("Name:")) {
		return Process{}, processErr(pid, "status", io.ErrUnexpectedEOF)
	}
	// Kernel threads have none of these lines and keep 0.
	var anon, shmem uint64
	for _, f := range []struct {
		name string
		to   *uint64
	}{{"RssAnon:", &anon}, {"RssShmem:", &shmem}, {"VmSwap:", &proc.SwapBytes}} {
		if *f.to, err = statusKB(b, f.name); err != nil {
			return Process{}, processErr(pid, "status", err)
		}
	}
	proc.OwnResidentBytes = anon + shmem
	return proc, nil
}

func (fs FS) pidFile(pid int, name string) string {
	return fs.path + "/" + strconv.Itoa(pid) + "/" + name
}

// Buffers for one read of a process's files, sized to their longest lines
// with room to spare (bench/README.md, Where the defaults come from); a
// status with many supplementary groups runs past its buffer after VmSwap.
const (
	statBufSize   = 1024
	statusBufSize = 4096
)

// readSmall reads a small procfs file into buf with one open, reads and a
// close, and returns what it read, at most len(buf) bytes. os.ReadFile would
// add a poller registration, two fcntls and an allocation per file; a scan
// of thousands of processes a second pays for each.
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := openRetry(path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case m == 0:
			return buf[:n], nil
		}
		n += m
	}
	return buf[:n], nil
}

func openRetry(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// parseStat parses /proc/<pid>/stat: "pid (comm) state ppid ...". The comm
// may hold spaces and parentheses, so the fields start after the last ')'.
// A line cut short (the process went away mid-read) is io.ErrUnexpectedEOF.
func parseStat(b []byte) (Process, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Process{}, fmt.Errorf("no (comm) in %q: %w", b, io.ErrUnexpectedEOF)
	}
	// Fields after the comm, from 0: state, ppid, pgrp, session, tty_nr,
	// tpgid, flags, minflt, cminflt, majflt, cmajflt, utime, stime, cutime,
	// cstime, priority, nice, num_threads, itrealvalue, starttime, vsize,
	// rss.
	const (
		fMinflt    = 7
		fMajflt    = 9
		fUtime     = 11
		fStime     = 12
		fStarttime = 19
		fVsize     = 20
		fRss       = 21
	)
	var f [fRss + 1][]byte
	rest := b[end+1:]
	for i := range f {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexAny(rest, " \n")
		if j < 0 {
			j = len(rest)
		}
		if j == 0 {
			return Process{}, fmt.Errorf("stat has %d fields after the comm, want %d: %w", i, len(f), io.ErrUnexpectedEOF)
		}
		f[i], rest = rest[:j], rest[j:]
	}
	var v [fRss + 1]uint64
	for _, i := range []int{fMinflt, fMajflt, fUtime, fStime, fStarttime, fVsize} {
		n, err := strconv.ParseUint(string(f[i]), 10, 64)
		if err != nil {
			return Process{}, fmt.Errorf("stat field %d: %w", i+3, err)
		}
		v[i] = n
	}
	// rss is signed in the kernel's format (%ld); a negative one is 0.
	rss, err := strconv.ParseInt(string(f[fRss]), 10, 64)
	if err != nil {
		return Process{}, fmt.Errorf("stat field %d: %w", fRss+3, err)
	}
	return Process{
		State:         f[0][0],
		Comm:          comm(b[open+1 : end]),
		StartTicks:    v[fStarttime],
		MinorFaults:   v[fMinflt],
		MajorFaults:   v[fMajflt],
		UserSeconds:   float64(v[fUtime]) / userHZ,
		SystemSeconds: float64(v[fStime]) / userHZ,
		ResidentBytes: uint64(max(rss, 0)) * pageSize,
		VirtualBytes:  v[fVsize],
	}, nil
}

var pageSize = uint64(os.Getpagesize())

// statusKB returns the value of a "Field:   N kB" line of status in bytes,
// 0 when there is no such line.
func statusKB(b []byte, field string) (uint64, error) {
	i := bytes.Index(b, []byte("\n"+field))
	if i < 0 {
		return 0, nil
	}
	line := b[i+1+len(field):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	num, ok := bytes.CutSuffix(bytes.TrimSpace(line), []byte(" kB"))
	n, err := strconv.ParseUint(string(bytes.TrimSpace(num)), 10, 64)
	if !ok || err != nil || n > 1<<44 {
		// 2^44 kB is 16 EiB, past any address space: not a size.
		return 0, fmt.Errorf("bad %s line %q", field, line)
	}
	return n << 10, nil
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

// comm returns a process name as valid UTF-8: the kernel cuts a name at 15
// bytes, often inside a character, and a process may name itself anything.
// Each invalid byte becomes U+FFFD, so every label, CSV cell and record
// made from it is valid.
func comm(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
