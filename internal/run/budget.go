package run

import (
	"fmt"
	"strings"
)

// Host is what the safety budget needs to know about the machine.
type Host struct {
	MemTotalBytes, MemAvailableBytes int64
	SwapTotalBytes, SwapFreeBytes    int64
	// DiskFreeBytes is free space where backing=file puts its files.
	DiskFreeBytes int64
}

// ConsumerOverheadBytes is what one consumer process costs beyond its
// region: the Go runtime's heap, stacks and page tables, charged to the run
// cgroup, with a margin of twice what it was measured at.
const ConsumerOverheadBytes = 4 << 20

// Headroom is the memory the host keeps for everything else while a run
// holds its limit: a tenth of RAM, at least 512 MiB.
func (h Host) Headroom() int64 { return max(h.MemTotalBytes/10, 512<<20) }

// SwapReserve is the swap left free for the rest of the host: a tenth.
func (h Host) SwapReserve() int64 { return h.SwapTotalBytes / 10 }

// Check refuses a spec that cannot run safely on this host. Each refusal is
// an *UnsafeError that says what to change.
func (r Resolved) Check(h Host) error {
	demand := r.Demand() + int64(r.Processes())*ConsumerOverheadBytes
	if limit := h.MemAvailableBytes - h.Headroom(); r.MemoryLimitBytes > limit {
		return refuse("memory_limit_bytes %s is more than this host can give: %s available minus %s headroom leaves %s; lower memory_limit_bytes or scale",
			size(r.MemoryLimitBytes), size(h.MemAvailableBytes), size(h.Headroom()), size(max(limit, 0)))
	}
	over := demand - r.MemoryLimitBytes // what must live outside RAM
	switch r.Backing {
	case BackingAnon:
		if over <= 0 {
			return nil
		}
		if h.SwapTotalBytes == 0 {
			return refuse("no swap configured: an anon thrash of %s in a %s limit would OOM; add swap (fallocate, mkswap, swapon) or use backing=file",
				size(demand), size(r.MemoryLimitBytes))
		}
		if free := h.SwapFreeBytes - h.SwapReserve(); over > free {
			return refuse("total demand %s (%d × %s plus %s per process) exceeds the %s limit plus %s of usable free swap (%s free, %s kept for the host): it would OOM; lower consumers, size_bytes or scale, raise memory_limit_bytes, or add swap",
				size(demand), r.Consumers, size(r.SizeBytes), size(ConsumerOverheadBytes), size(r.MemoryLimitBytes), size(max(free, 0)), size(h.SwapFreeBytes), size(h.SwapReserve()))
		}
	case BackingFile:
		if need := r.Demand() + r.Demand()/10; need > h.DiskFreeBytes {
			return refuse("backing=file needs %s of disk for the consumers' files and %s is free: free some space, point --data.dir elsewhere, or lower consumers, size_bytes or scale",
				size(need), size(h.DiskFreeBytes))
		}
	}
	return nil
}

// Processes is how many consumer processes the run starts.
func (r Resolved) Processes() int {
	if r.Shape() == ShapeFill {
		return 1
	}
	return r.Consumers
}

func refuse(format string, args ...any) error {
	return &UnsafeError{Msg: fmt.Sprintf(format, args...)}
}

// size prints bytes in binary units, for messages.
func size(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	v, i := float64(b), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	s := fmt.Sprintf("%.1f", v)
	return strings.TrimSuffix(s, ".0") + " " + string("KMGTP"[i]) + "iB"
}
