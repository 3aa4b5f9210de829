package procfs

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// VMStat holds the /proc/vmstat counters thrashscope exports. All are
// cumulative since boot.
type VMStat struct {
	PswpIn, PswpOut uint64 // pages swapped in/out
	// PgpgIn and PgpgOut are KiB of block I/O despite their name; they stay
	// raw so the file and the struct can be compared by eye.
	PgpgIn, PgpgOut                                uint64
	PgFault, PgMajFault                            uint64
	WorkingsetRefaultAnon, WorkingsetRefaultFile   uint64
	WorkingsetActivateAnon, WorkingsetActivateFile uint64
	WorkingsetRestoreAnon, WorkingsetRestoreFile   uint64
	// PgStealAnon and PgStealFile are the pages reclaim took, every
	// reclaim counted (a cgroup's at its limit too), since Linux 5.8.
	PgStealAnon, PgStealFile uint64
	OOMKill                  uint64
}

// ParseVMStat parses the "name value" lines of /proc/vmstat. Unknown names
// are ignored and missing ones stay 0, because the set changes with kernel
// version and config.
func ParseVMStat(r io.Reader) (VMStat, error) {
	v, _, err := parseVMStat(r)
	return v, err
}

// parseVMStat is ParseVMStat, and whether the file had a pgfault line:
// every kernel prints one, so a read without it was of an empty or cut
// file, not of the kernel's counters. It reads the file's 180-odd lines
// (one read a sample) without a string for each: the lines and their
// fields were four in ten of the sampler's allocations.
func parseVMStat(r io.Reader) (VMStat, bool, error) {
	var v VMStat
	sawFault := false
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		name, value, fields := nameValue(line)
		if fields == 0 {
			continue
		}
		if fields != 2 {
			return VMStat{}, false, fmt.Errorf("vmstat line %d: want \"name value\", got %q", n, line)
		}
		dst := v.field(name)
		if dst == nil {
			continue
		}
		val, ok := ParseDecimal(value)
		if !ok {
			_, err := strconv.ParseUint(string(value), 10, 64)
			return VMStat{}, false, fmt.Errorf("vmstat line %d: %s: %w", n, name, err)
		}
		*dst = val
		sawFault = sawFault || string(name) == "pgfault"
	}
	if err := sc.Err(); err != nil {
		return VMStat{}, false, fmt.Errorf("vmstat: %w", err)
	}
	return v, sawFault, nil
}

// nameValue splits a line into its first two fields, separated by white
// space as strings.Fields separates them, and says how many fields it has
// (counting to 3: more is too many).
func nameValue(line []byte) (name, value []byte, fields int) {
	for i := 0; i < len(line) && fields < 3; {
		if sp, size := spaceAt(line[i:]); sp {
			i += size
			continue
		}
		start := i
		for i < len(line) {
			sp, size := spaceAt(line[i:])
			if sp {
				break
			}
			i += size
		}
		switch fields {
		case 0:
			name = line[start:i]
		case 1:
			value = line[start:i]
		}
		fields++
	}
	return name, value, fields
}

// spaceAt says whether b starts with white space, and the size of its
// first character.
func spaceAt(b []byte) (space bool, size int) {
	if c := b[0]; c < utf8.RuneSelf {
		return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r', 1
	}
	r, size := utf8.DecodeRune(b)
	return unicode.IsSpace(r), size
}

// ParseDecimal is strconv.ParseUint(string(b), 10, 64) without the
// string; false for anything it would refuse. The readers of kernel files
// that must not allocate share it.
func ParseDecimal(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

func (v *VMStat) field(name []byte) *uint64 {
	switch string(name) {
	case "pswpin":
		return &v.PswpIn
	case "pswpout":
		return &v.PswpOut
	case "pgpgin":
		return &v.PgpgIn
	case "pgpgout":
		return &v.PgpgOut
	case "pgfault":
		return &v.PgFault
	case "pgmajfault":
		return &v.PgMajFault
	case "workingset_refault_anon":
		return &v.WorkingsetRefaultAnon
	case "workingset_refault_file":
		return &v.WorkingsetRefaultFile
	case "workingset_activate_anon":
		return &v.WorkingsetActivateAnon
	case "workingset_activate_file":
		return &v.WorkingsetActivateFile
	case "workingset_restore_anon":
		return &v.WorkingsetRestoreAnon
	case "workingset_restore_file":
		return &v.WorkingsetRestoreFile
	case "pgsteal_anon":
		return &v.PgStealAnon
	case "pgsteal_file":
		return &v.PgStealFile
	case "oom_kill":
		return &v.OOMKill
	}
	return nil
}

// VMStat reads /proc/vmstat.
func (fs FS) VMStat() (VMStat, error) {
	f, err := os.Open(filepath.Join(fs.path, "vmstat"))
	if err != nil {
		return VMStat{}, fmt.Errorf("reading vmstat: %w", err)
	}
	defer f.Close()
	v, sawFault, err := parseVMStat(f)
	if err != nil {
		return VMStat{}, fmt.Errorf("reading %s: %w", f.Name(), err)
	}
	if !sawFault {
		// Its counters read as 0 would be a counter reset to Prometheus.
		return VMStat{}, fmt.Errorf("reading %s: no pgfault line, which every kernel prints: the file is empty or cut short", f.Name())
	}
	return v, nil
}
