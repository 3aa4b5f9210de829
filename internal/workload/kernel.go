package workload

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/procfs"
)

// Kernel is a workload's readings of its cgroup's own files: what the
// kernel itself says of the cgroup's memory, beside the probes' counts.
// A reading the cgroup has no file for is left out, and Missing says why.
type Kernel struct {
	// Pressure is memory.pressure, the group's PSI (cgroup2: every group
	// has it, on a hybrid host too).
	Pressure    Pressure
	HasPressure bool
	// Events are memory.events' high, max, oom and oom_kill (v2); on v1,
	// max is memory.failcnt and oom_kill memory.oom_control's.
	Events map[string]uint64
	// Refaults and Activations are memory.stat's workingset_refault_* and
	// workingset_activate_* (v1 has no activations), by type.
	Refaults, Activations map[string]uint64
	// MajorFaults is memory.stat's pgmajfault (v1: total_pgmajfault).
	MajorFaults    uint64
	HasMajorFaults bool
	// CurrentBytes and SwapBytes are memory.current and
	// memory.swap.current (v1: usage_in_bytes, memsw less it); -1 unread.
	CurrentBytes, SwapBytes int64
	// MaxBytes and HighBytes are memory.max and memory.high (v1:
	// limit_in_bytes, and no high); -1 when unlimited or unread.
	MaxBytes, HighBytes int64
	// LimitBytes is the limit the cgroup lives under: the tightest
	// memory.max of it and its ancestors (v1: memory.stat's
	// hierarchical_memory_limit); -1 when none or unread.
	LimitBytes int64
	// Missing names each reading left out, with why.
	Missing []string
}

// Pressure is a memory.pressure file's totals.
type Pressure struct {
	Some, Full time.Duration
}

// Event names as in memory.events, in the order they are exported.
var Events = []string{"high", "max", "oom", "oom_kill"}

// Types of refault and activation, as in memory.stat.
var Types = []string{"anon", "file"}

// Files says where a workload's cgroup files are: its group in the cgroup2
// hierarchy, and (where the memory controller is on v1) its group in the
// v1 memory hierarchy, "" when it has none.
type Files struct {
	V2, V1Memory string
	// V2Root is the cgroup2 mount, where the walk up for the limit stops.
	V2Root string
}

// Reader reads the file name in the directory dir whole, as os.ReadFile
// does; the slice it returns may be valid only until its next read. A
// *kernfile.Set keeps each file open between readings.
type Reader interface {
	ReadFileAt(dir, name string) ([]byte, error)
}

type osReader struct{}

func (osReader) ReadFileAt(dir, name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(dir, name))
}

// ReadKernel reads a workload's cgroup files once.
func ReadKernel(f Files) Kernel { return ReadKernelFrom(osReader{}, f) }

// ReadKernelFrom reads a workload's cgroup files through r.
func ReadKernelFrom(r Reader, f Files) Kernel {
	k := Kernel{CurrentBytes: -1, SwapBytes: -1, MaxBytes: -1, HighBytes: -1, LimitBytes: -1}
	missing := func(what string, err error) {
		if errors.Is(err, fs.ErrNotExist) {
			err = errors.New("no such file")
		}
		k.Missing = append(k.Missing, fmt.Sprintf("%s (%v)", what, err))
	}
	if f.V2 == "" {
		missing("memory.pressure", errors.New("no cgroup2 group"))
	} else if b, err := r.ReadFileAt(f.V2, "memory.pressure"); err != nil {
		missing("memory.pressure", err)
	} else if k.Pressure, err = parsePressure(string(b)); err != nil {
		missing("memory.pressure", err)
	} else {
		k.HasPressure = true
	}
	// memory.current is where the memory controller is on the cgroup2
	// group: read first, it says which hierarchy the rest is read in. A
	// v1 memory group means the controller is bound to v1, and the cgroup2
	// group has no memory.current to look for at every sample.
	v2 := false
	if f.V2 != "" && f.V1Memory == "" {
		if b, err := r.ReadFileAt(f.V2, "memory.current"); err == nil {
			k.CurrentBytes, v2 = parseBytes(b, "memory.current", missing), true
		}
	}
	if v2 {
		k.readV2(r, f.V2, f.V2Root, missing)
	} else if f.V1Memory != "" {
		k.readV1(r, f.V1Memory, missing)
	} else {
		missing("memory.current, memory.events, memory.stat", errors.New("the memory controller is not on this cgroup2 group, and it has no v1 memory group at the same path"))
	}
	return k
}

func (k *Kernel) readV2(r Reader, dir, root string, missing func(string, error)) {
	var v [len(statKeysV2)]uint64
	if _, err := readKeys(r, dir, "memory.events", Events, v[:len(Events)]); err != nil {
		missing("memory.events", err)
	} else {
		k.Events = make(map[string]uint64, len(Events))
		for i, e := range Events {
			k.Events[e] = v[i]
		}
	}
	if _, err := readKeys(r, dir, "memory.stat", statKeysV2[:], v[:]); err != nil {
		missing("memory.stat", err)
	} else {
		k.Refaults, k.Activations = map[string]uint64{"anon": v[0], "file": v[1]}, map[string]uint64{"anon": v[2], "file": v[3]}
		k.MajorFaults, k.HasMajorFaults = v[4], true
	}
	k.SwapBytes = readBytes(r, dir, "memory.swap.current", "memory.swap.current", missing)
	k.MaxBytes = readBytes(r, dir, "memory.max", "memory.max", missing)
	k.HighBytes = readBytes(r, dir, "memory.high", "memory.high", missing)
	k.LimitBytes = k.MaxBytes
	for d := filepath.Dir(dir); root != "" && strings.HasPrefix(d, root) && d != root; d = filepath.Dir(d) {
		b, err := r.ReadFileAt(d, "memory.max")
		if err != nil {
			break // no memory controller above here
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && (k.LimitBytes < 0 || n < k.LimitBytes) {
			k.LimitBytes = n
		}
	}
}

func (k *Kernel) readV1(r Reader, dir string, missing func(string, error)) {
	k.Events = map[string]uint64{}
	if n := readBytes(r, dir, "memory.failcnt", "memory.failcnt", missing); n >= 0 {
		k.Events["max"] = uint64(n)
	}
	var v [len(statKeysV1)]uint64
	if found, err := readKeys(r, dir, "memory.oom_control", oomKillKey, v[:1]); err != nil {
		missing("memory.oom_control", err)
	} else if found&1 != 0 {
		k.Events["oom_kill"] = v[0]
	}
	if found, err := readKeys(r, dir, "memory.stat", statKeysV1[:], v[:]); err != nil {
		missing("memory.stat", err)
	} else {
		k.Refaults = map[string]uint64{"anon": v[0], "file": v[1]}
		k.MajorFaults, k.HasMajorFaults = v[2], true
		if found&(1<<3) != 0 && v[3] < unlimitedV1 {
			k.LimitBytes = int64(v[3])
		}
	}
	k.CurrentBytes = readBytes(r, dir, "memory.usage_in_bytes", "memory.usage_in_bytes", missing)
	if memsw := readBytes(r, dir, "memory.memsw.usage_in_bytes", "memory.memsw.usage_in_bytes (swap accounting off?)", missing); memsw >= 0 && k.CurrentBytes >= 0 {
		k.SwapBytes = max(0, memsw-k.CurrentBytes)
	}
	k.MaxBytes = readBytes(r, dir, "memory.limit_in_bytes", "memory.limit_in_bytes", missing)
	if k.MaxBytes >= unlimitedV1 {
		k.MaxBytes = -1
	}
}

// unlimitedV1 is where a v1 limit means none: the page-rounded
// LONG_MAX the kernel shows for an unset limit.
const unlimitedV1 = math.MaxInt64 &^ (1<<20 - 1)

// readBytes reads a file of one number, or "max" (-1); -1 and a missing
// entry when it cannot.
func readBytes(r Reader, dir, name, what string, missing func(string, error)) int64 {
	b, err := r.ReadFileAt(dir, name)
	if err != nil {
		missing(what, err)
		return -1
	}
	return parseBytes(b, what, missing)
}

// parseBytes parses a file of one number, or "max" (-1).
func parseBytes(b []byte, what string, missing func(string, error)) int64 {
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		missing(what, fmt.Errorf("%q is not a number", s))
		return -1
	}
	return n
}

// The keys read from each flat-keyed file, in the order their values are
// kept: Types' order (anon, file) for refaults and activations.
var (
	statKeysV2 = [...]string{"workingset_refault_anon", "workingset_refault_file", "workingset_activate_anon", "workingset_activate_file", "pgmajfault"}
	statKeysV1 = [...]string{"total_workingset_refault_anon", "total_workingset_refault_file", "total_pgmajfault", "hierarchical_memory_limit"}
	oomKillKey = []string{"oom_kill"}
)

// readKeys reads a flat-keyed file ("key N" a line) and sets vals[i] to
// the value of keys[i], or 0 when the file has no such line; found has
// bit i set for each key it has. A file with no "key N" line at all is an
// error. It picks the few keys wanted out of the file's bytes, without a
// map of every line (memory.stat has 40 to 70): one per workload a second.
func readKeys(r Reader, dir, name string, keys []string, vals []uint64) (found uint64, err error) {
	b, err := r.ReadFileAt(dir, name)
	if err != nil {
		return 0, err
	}
	clear(vals)
	lines := 0
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		key, val, ok := bytes.Cut(bytes.TrimSpace(line), []byte{' '})
		if !ok {
			continue
		}
		n, ok := procfs.ParseDecimal(bytes.TrimSpace(val))
		if !ok {
			continue
		}
		lines++
		for i, k := range keys {
			if string(key) == k {
				vals[i], found = n, found|1<<i
				break
			}
		}
	}
	if lines == 0 {
		return 0, errors.New("empty")
	}
	return found, nil
}

// parsePressure reads the totals of a memory.pressure file: "some
// avg10=… total=<µs>" and "full …".
func parsePressure(text string) (Pressure, error) {
	var p Pressure
	seen := 0
	for line := range strings.Lines(text) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		for _, f := range fields[1:] {
			v, ok := strings.CutPrefix(f, "total=")
			if !ok {
				continue
			}
			us, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return p, fmt.Errorf("total=%q is not a number", v)
			}
			switch fields[0] {
			case "some":
				p.Some, seen = time.Duration(us)*time.Microsecond, seen|1
			case "full":
				p.Full, seen = time.Duration(us)*time.Microsecond, seen|2
			}
		}
	}
	if seen&1 == 0 {
		return p, errors.New("no \"some\" total")
	}
	return p, nil
}

// V1MemoryGroup finds, where the memory controller is on cgroup v1
// (mounted at v1Mount), the v1 memory group of the workload at path (from
// the cgroup2 root): the group at the same path, which systemd keeps alike
// in both trees; "" when there is none, and the workload's memory readings
// are left out. Never a member's group, nor an ancestor: a process may be
// in its cgroup2 group before it joins its v1 one (thrashscope's consumers
// are, for a second or two), and the workload would report its parent's
// figures, then fall back to its own.
func V1MemoryGroup(v1Mount, path string) string {
	if dir := filepath.Join(v1Mount, path); isDir(dir) {
		return dir
	}
	return ""
}

func isDir(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}
