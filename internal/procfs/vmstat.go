package procfs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	OOMKill                                        uint64
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
// file, not of the kernel's counters.
func parseVMStat(r io.Reader) (VMStat, bool, error) {
	var v VMStat
	sawFault := false
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return VMStat{}, false, fmt.Errorf("vmstat line %d: want \"name value\", got %q", n, line)
		}
		dst := v.field(fields[0])
		if dst == nil {
			continue
		}
		val, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			return VMStat{}, false, fmt.Errorf("vmstat line %d: %s: %w", n, fields[0], err)
		}
		*dst = val
		sawFault = sawFault || fields[0] == "pgfault"
	}
	if err := sc.Err(); err != nil {
		return VMStat{}, false, fmt.Errorf("vmstat: %w", err)
	}
	return v, sawFault, nil
}

func (v *VMStat) field(name string) *uint64 {
	switch name {
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
