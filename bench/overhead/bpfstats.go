package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// thrashscopePrograms are the observer's BPF programs, by the C function
// names in bpf/, in the order they are reported.
var thrashscopePrograms = []string{
	"fault_entry_user", "fault_entry_kernel", "filemap_fault", "major_fault",
	"reclaim_begin_direct", "reclaim_end_direct", "reclaim_begin_memcg", "reclaim_end_memcg",
	"memory_stall_sample", "memory_stall", "process_exit",
}

// bpfObjNameLen is the kernel's BPF_OBJ_NAME_LEN: a program name keeps 15
// bytes and a NUL, so fault_entry_user is loaded as fault_entry_use.
const bpfObjNameLen = 16

// programName maps a loaded program's name to the thrashscope program it is.
// It takes the full name (cilium/ebpf recovers it from BTF when it can) or
// exactly the kernel's truncation of it, nothing shorter.
func programName(loaded string) (string, bool) {
	for _, p := range thrashscopePrograms {
		if loaded == p || loaded == p[:min(len(p), bpfObjNameLen-1)] {
			return p, true
		}
	}
	return "", false
}

// enableBPFStats turns on the kernel's per-program run time and run count
// (BPF_ENABLE_STATS) until the returned Closer is closed. No sysctl changes:
// the kernel keeps statistics on while any such descriptor is open.
func enableBPFStats() (io.Closer, error) {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enabling BPF run-time statistics (BPF_ENABLE_STATS, Linux 5.8+, CAP_SYS_ADMIN): %w", err)
	}
	return c, nil
}

// programCounters are one program's cumulative kernel statistics, or the
// difference of two readings.
type programCounters struct {
	Name            string `json:"name"`
	Runs            uint64 `json:"runs"`
	RunTimeNs       uint64 `json:"run_time_ns"`
	RecursionMisses uint64 `json:"recursion_misses"`
}

// countersSnapshot is one reading of every held program, by program ID.
type countersSnapshot map[ebpf.ProgramID]programCounters

// countersDelta is after minus before, summed per thrashscope program and
// returned in report order. Every program read before must be read after:
// the benchmark holds them open, so one vanishing or going backwards means
// the readings are not of the same programs.
func countersDelta(before, after countersSnapshot) ([]programCounters, error) {
	if before == nil || after == nil {
		return nil, errors.New("BPF statistics were not read at both ends of the window")
	}
	byName := map[string]programCounters{}
	for id, b := range before {
		a, ok := after[id]
		if !ok {
			return nil, fmt.Errorf("BPF program %d (%s) was read when the window opened but not when it closed", id, b.Name)
		}
		if a.Runs < b.Runs || a.RunTimeNs < b.RunTimeNs || a.RecursionMisses < b.RecursionMisses {
			return nil, fmt.Errorf("BPF program %d (%s) statistics went backwards: %+v then %+v", id, b.Name, b, a)
		}
		d := byName[b.Name]
		d.Name = b.Name
		d.Runs += a.Runs - b.Runs
		d.RunTimeNs += a.RunTimeNs - b.RunTimeNs
		d.RecursionMisses += a.RecursionMisses - b.RecursionMisses
		byName[b.Name] = d
	}
	return orderedPrograms(byName), nil
}

// orderedPrograms lists the thrashscope programs present in byName in
// report order.
func orderedPrograms(byName map[string]programCounters) []programCounters {
	var out []programCounters
	for _, name := range thrashscopePrograms {
		if c, ok := byName[name]; ok {
			out = append(out, c)
		}
	}
	return out
}

// heldProgramIDs are the BPF programs a process holds a descriptor to,
// directly or through a BPF link: both kinds of fdinfo carry a prog_id line.
// It tells the observer's programs from same-named ones someone else loaded,
// such as a probe test running alongside.
func heldProgramIDs(procRoot string, pid int) (map[ebpf.ProgramID]bool, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid), "fdinfo")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing the observer's descriptors: %w", err)
	}
	ids := map[ebpf.ProgramID]bool{}
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // closed since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("reading the observer's descriptors: %w", err)
		}
		id, ok, err := parseFdinfoProgID(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f.Name(), err)
		}
		if ok {
			ids[id] = true
		}
	}
	return ids, nil
}

// parseFdinfoProgID finds the "prog_id:" line of one /proc/PID/fdinfo file.
func parseFdinfoProgID(r io.Reader) (ebpf.ProgramID, bool, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "prog_id:")
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		if err != nil {
			return 0, false, fmt.Errorf("prog_id %q: %w", v, err)
		}
		return ebpf.ProgramID(id), true, nil
	}
	return 0, false, sc.Err()
}

// heldProgram is one of the observer's programs, opened by ID.
type heldProgram struct {
	id   ebpf.ProgramID
	name string // as in thrashscopePrograms
	prog *ebpf.Program
}

// bpfStats reads the observer's programs' statistics at the edges of a
// window. The kernel's is kernelBPFStats; tests without privileges fake it.
type bpfStats interface {
	snapshot() (countersSnapshot, error)
	Close() error
}

// openBPFStatsFunc opens the statistics of the programs held by pid.
type openBPFStatsFunc func(procRoot string, pid int, logger *slog.Logger) (bpfStats, error)

// kernelBPFStats keeps BPF run-time statistics on and the observer's
// programs open for one observed phase.
type kernelBPFStats struct {
	enabled io.Closer
	*observerPrograms
}

// openKernelBPFStats turns statistics on, then opens the programs pid holds.
// They were loaded before, which is fine: only deltas are used.
func openKernelBPFStats(procRoot string, pid int, logger *slog.Logger) (bpfStats, error) {
	enabled, err := enableBPFStats()
	if err != nil {
		return nil, err
	}
	progs, err := openObserverPrograms(procRoot, pid, logger)
	if err != nil {
		enabled.Close()
		return nil, err
	}
	return &kernelBPFStats{enabled: enabled, observerPrograms: progs}, nil
}

// Close releases the programs, then turns statistics off (unless someone
// else holds them on).
func (k *kernelBPFStats) Close() error {
	k.observerPrograms.Close()
	return k.enabled.Close()
}

// observerPrograms are the thrashscope programs one observer process holds,
// opened before a window so that reading them at its edges costs one
// syscall per program.
type observerPrograms struct {
	progs []heldProgram
}

// openObserverPrograms walks every loaded BPF program and keeps those with a
// thrashscope name that the observer pid holds. Same-named programs held by
// nobody in particular are logged: they slow the workload as well, but are
// not the observer under test.
func openObserverPrograms(procRoot string, pid int, logger *slog.Logger) (*observerPrograms, error) {
	held, err := heldProgramIDs(procRoot, pid)
	if err != nil {
		return nil, err
	}
	o := &observerPrograms{}
	var foreign, seen []string
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("listing BPF programs: %w", err)
		}
		id = next
		prog, err := ebpf.NewProgramFromID(id)
		if errors.Is(err, os.ErrNotExist) {
			continue // unloaded since it was listed
		}
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("opening BPF program %d: %w", id, err)
		}
		info, err := prog.Info()
		if err != nil {
			prog.Close()
			o.Close()
			return nil, fmt.Errorf("reading BPF program %d: %w", id, err)
		}
		name, ok := programName(info.Name)
		switch {
		case ok && held[id]:
			o.progs = append(o.progs, heldProgram{id: id, name: name, prog: prog})
			continue
		case ok:
			foreign = append(foreign, fmt.Sprintf("%s (id %d)", info.Name, id))
		default:
			seen = append(seen, info.Name)
		}
		prog.Close()
	}
	if len(foreign) > 0 {
		logger.Warn("thrashscope BPF programs not held by the observer under test are loaded; "+
			"they slow the workloads too, but their run time is not attributed", "programs", strings.Join(foreign, ", "))
	}
	if len(o.progs) == 0 {
		return nil, fmt.Errorf("observer (pid %d) holds none of the BPF programs %s; loaded programs: %s",
			pid, strings.Join(thrashscopePrograms, ", "), strings.Join(seen, ", "))
	}
	o.warnMissing(logger)
	return o, nil
}

// warnMissing logs the thrashscope programs the observer does not hold.
func (o *observerPrograms) warnMissing(logger *slog.Logger) {
	var missing []string
	for _, name := range thrashscopePrograms {
		if !slices.ContainsFunc(o.progs, func(h heldProgram) bool { return h.name == name }) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		logger.Warn("observer does not hold every thrashscope BPF program", "missing", strings.Join(missing, ", "))
	}
}

// snapshot reads every held program's cumulative statistics.
func (o *observerPrograms) snapshot() (countersSnapshot, error) {
	s := make(countersSnapshot, len(o.progs))
	for _, h := range o.progs {
		st, err := h.prog.Stats()
		if err != nil {
			return nil, fmt.Errorf("reading statistics of BPF program %d (%s): %w", h.id, h.name, err)
		}
		s[h.id] = programCounters{
			Name:            h.name,
			Runs:            st.RunCount,
			RunTimeNs:       uint64(st.Runtime.Nanoseconds()),
			RecursionMisses: st.RecursionMisses,
		}
	}
	return s, nil
}

// Close releases the descriptors; the programs stay loaded by the observer.
func (o *observerPrograms) Close() {
	for _, h := range o.progs {
		h.prog.Close()
	}
	o.progs = nil
}
