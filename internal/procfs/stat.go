package procfs

import (
	"fmt"

	promprocfs "github.com/prometheus/procfs"
)

// CPUSeconds is the time all CPUs together spent in each mode since boot,
// from the "cpu" line of /proc/stat.
type CPUSeconds struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal float64
}

// CPU reads the system-wide CPU times.
func (fs FS) CPU() (CPUSeconds, error) {
	st, err := fs.proc.Stat()
	if err != nil {
		return CPUSeconds{}, fmt.Errorf("reading stat: %w", err)
	}
	c := st.CPUTotal
	// prometheus/procfs leaves CPUTotal zero when the line is missing, and
	// a running system never has an all-zero cpu line.
	if c == (promprocfs.CPUStat{}) {
		return CPUSeconds{}, fmt.Errorf("reading stat: no \"cpu\" line in %s/stat", fs.path)
	}
	return CPUSeconds{
		User:    c.User,
		Nice:    c.Nice,
		System:  c.System,
		Idle:    c.Idle,
		IOWait:  c.Iowait,
		IRQ:     c.IRQ,
		SoftIRQ: c.SoftIRQ,
		Steal:   c.Steal,
	}, nil
}
