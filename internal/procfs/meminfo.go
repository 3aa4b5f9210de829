package procfs

import "fmt"

// Memory is the system memory and swap size, in bytes.
type Memory struct {
	TotalBytes, AvailableBytes, SwapTotalBytes, SwapFreeBytes uint64
}

// Memory reads MemTotal, MemAvailable, SwapTotal and SwapFree from
// /proc/meminfo.
func (fs FS) Memory() (Memory, error) {
	mi, err := fs.proc.Meminfo()
	if err != nil {
		return Memory{}, fmt.Errorf("reading meminfo: %w", err)
	}
	// A missing line is an error rather than 0: every kernel since 3.14
	// prints all four, and a 0 would read as "out of memory" downstream.
	for _, f := range []struct {
		name string
		v    *uint64
	}{
		{"MemTotal", mi.MemTotalBytes},
		{"MemAvailable", mi.MemAvailableBytes},
		{"SwapTotal", mi.SwapTotalBytes},
		{"SwapFree", mi.SwapFreeBytes},
	} {
		if f.v == nil {
			return Memory{}, fmt.Errorf("reading meminfo: no %s line in %s/meminfo", f.name, fs.path)
		}
	}
	return Memory{
		TotalBytes:     *mi.MemTotalBytes,
		AvailableBytes: *mi.MemAvailableBytes,
		SwapTotalBytes: *mi.SwapTotalBytes,
		SwapFreeBytes:  *mi.SwapFreeBytes,
	}, nil
}
