package diagnosis

import (
	"cmp"
	"fmt"
)

// Kind is the kind of a thrash: what the memory the group lacks is made of,
// or what holds it back.
type Kind string

const (
	// KindAnon: anonymous pages swapped out and faulted back in.
	KindAnon Kind = "anon-swap-in"
	// KindShmem: shared memory (tmpfs, shared anonymous) swapped out and
	// back.
	KindShmem Kind = "shmem-swap-in"
	// KindFile: page cache dropped and read back (refaults), no swap.
	KindFile Kind = "page-cache-refault"
	// KindCompressedPool: the compressed pool (zswap, zram) is full, and
	// pages go to the slower device behind it or nowhere.
	KindCompressedPool Kind = "compressed-pool"
	// KindDevice: the swap device is at its ceiling: faults queue on it.
	KindDevice Kind = "device-bound"
)

// Evidence is what a diagnosis's kind rests on, over the last interval.
type Evidence struct {
	// Major faults per second by kind (the probes' anon, shmem, file).
	AnonFaultsPerSecond  float64 `json:"anon_faults_per_second"`
	ShmemFaultsPerSecond float64 `json:"shmem_faults_per_second"`
	FileFaultsPerSecond  float64 `json:"file_faults_per_second"`
	// Refaults per second from memory.stat (anon, file).
	AnonRefaultsPerSecond float64 `json:"anon_refaults_per_second"`
	FileRefaultsPerSecond float64 `json:"file_refaults_per_second"`
	// PSI some and full, % of the interval.
	PSISomePercent float64 `json:"psi_some_percent"`
	PSIFullPercent float64 `json:"psi_full_percent"`
	// DeviceBusyPercent is the busiest swap disk's utilisation (time with
	// I/O in flight), -1 unknown; PoolFullPercent the fullest compressed
	// pool's fill against its bound (zswap's max_pool_percent, a zram
	// swap area's size or mem_limit), -1 with none. Device and Pool name
	// them.
	DeviceBusyPercent float64 `json:"device_busy_percent"`
	Device            string  `json:"device,omitempty"`
	PoolFullPercent   float64 `json:"pool_full_percent"`
	Pool              string  `json:"pool,omitempty"`
	// IOLimitPercent is how much of the group's own I/O limit its reads
	// used over the interval (cgroup v2 io.max, v1 blkio.throttle; the
	// larger of I/Os and bytes), -1 with no read limit; IOLimit names it
	// as io.max writes it ("253:0 riops=120"). A throttled group's swap
	// device is as fast as its limit, whatever the disk's busy share.
	IOLimitPercent float64 `json:"io_limit_percent"`
	IOLimit        string  `json:"io_limit,omitempty"`
	// CompressRatio is how a sample of CompressPages of the group's
	// resident anonymous pages compresses, each page on its own with LZ4
	// as a pool stores it; 0 when not sampled (a page-cache thrash, or no
	// CAP_SYS_PTRACE).
	CompressRatio float64 `json:"compress_ratio"`
	CompressPages int     `json:"compress_pages"`
}

// deviceBound is the swap disk's utilisation from which it is at its
// ceiling: a disk busy nearly all the time queues every fault (in a heavy
// thrash here, 15,000 reads a second at a queue 38 deep).
const deviceBound = 90

// poolFull is the compressed pool's fill from which it is full: zswap
// rejects stores past its max_pool_percent, zram past its disksize.
const poolFull = 95

// KindOf is the kind of a thrash from its evidence: the pool where it is
// full under the swap-ins that dominate, else the fault kind that
// dominates. A busy disk does not change it: every heavy thrash keeps its
// swap disk busy, and the memory it lacks is still anon or shmem; only a
// thrash no limit explains is device-bound (atTheCeiling).
func KindOf(e Evidence) Kind {
	swapIns := e.AnonFaultsPerSecond + e.ShmemFaultsPerSecond
	switch {
	case e.FileFaultsPerSecond > swapIns:
		return KindFile // the swap device and pool hold back no file's pages
	case swapIns > 0 && e.PoolFullPercent >= poolFull:
		return KindCompressedPool
	case e.ShmemFaultsPerSecond > e.AnonFaultsPerSecond:
		return KindShmem
	}
	return KindAnon
}

// atTheCeiling says whether the swap-ins that dominate wait on a disk at
// its ceiling, or on the group's own I/O limit.
func atTheCeiling(e Evidence) bool {
	swapIns := e.AnonFaultsPerSecond + e.ShmemFaultsPerSecond
	return swapIns > 0 && swapIns >= e.FileFaultsPerSecond && (e.DeviceBusyPercent >= deviceBound || e.IOLimitPercent >= deviceBound)
}

// ceiling says what holds the swap-ins back: the group's I/O limit where
// it is spent, else the swap disk's busy share.
func (e Evidence) ceiling() string {
	if e.IOLimitPercent >= deviceBound {
		return fmt.Sprintf("its own I/O limit (%s) is %.0f %% used", e.IOLimit, e.IOLimitPercent)
	}
	return fmt.Sprintf("%s is %.0f %% busy", swapDisk(e), e.DeviceBusyPercent)
}

// summary is the evidence in a few words, for the one-line summary.
func (e Evidence) summary(k Kind) string {
	switch k {
	case KindFile:
		return fmt.Sprintf("%.0f page-cache faults/s", e.FileFaultsPerSecond)
	case KindDevice:
		if e.IOLimitPercent >= deviceBound {
			return fmt.Sprintf("%.0f swap-ins/s at %.0f %% of its I/O limit %s", e.AnonFaultsPerSecond+e.ShmemFaultsPerSecond, e.IOLimitPercent, e.IOLimit)
		}
		return fmt.Sprintf("%.0f swap-ins/s on %s, %.0f %% busy", e.AnonFaultsPerSecond+e.ShmemFaultsPerSecond, cmp.Or(e.Device, "the swap disk"), e.DeviceBusyPercent)
	case KindCompressedPool:
		return fmt.Sprintf("%.0f swap-ins/s, %s %.0f %% full", e.AnonFaultsPerSecond+e.ShmemFaultsPerSecond, cmp.Or(e.Pool, "the compressed pool"), e.PoolFullPercent)
	}
	return fmt.Sprintf("%.0f swap-ins/s", e.AnonFaultsPerSecond+e.ShmemFaultsPerSecond)
}
