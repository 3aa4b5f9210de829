package procfs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Pressure is the memory pressure stall information (PSI).
type Pressure struct {
	SomeTotal, FullTotal time.Duration
	SomeAvg10, FullAvg10 float64 // percent, as in the file
}

// MemoryPressure reads /proc/pressure/memory. It returns an error matching
// ErrNoData when the kernel has no PSI.
func (fs FS) MemoryPressure() (Pressure, error) {
	st, err := fs.proc.PSIStatsForResource("memory")
	if noPSI(err) {
		return Pressure{}, fmt.Errorf("memory pressure: kernel without PSI (CONFIG_PSI=n or psi=0): %w", ErrNoData)
	}
	if err != nil {
		return Pressure{}, fmt.Errorf("reading pressure/memory: %w", err)
	}
	if st.Some == nil {
		// The file is there, so the kernel has PSI: a read without its
		// first line is a failed read, not a kernel without PSI.
		return Pressure{}, fmt.Errorf("reading %s/pressure/memory: no \"some\" line: the file is empty or cut short", fs.path)
	}
	p := Pressure{
		SomeTotal: time.Duration(st.Some.Total) * time.Microsecond,
		SomeAvg10: st.Some.Avg10,
	}
	if st.Full != nil {
		p.FullTotal = time.Duration(st.Full.Total) * time.Microsecond
		p.FullAvg10 = st.Full.Avg10
	}
	return p, nil
}

// noPSI reports whether err means PSI is absent: no file without
// CONFIG_PSI, EOPNOTSUPP where the file exists but PSI is disabled.
func noPSI(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP)
}
