package diagnosis

import "fmt"

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
	// DeviceBusyPercent is the swap device's utilisation (time with I/O in
	// flight), -1 unknown; PoolFullPercent the compressed pool's fill
	// against its bound, -1 with none.
	DeviceBusyPercent float64 `json:"device_busy_percent"`
	PoolFullPercent   float64 `json:"pool_full_percent"`
}

// deviceBound is the swap device's utilisation from which it is the
// bottleneck: a device busy nearly all the time queues every fault.
const deviceBound = 90

// poolFull is the compressed pool's fill from which it is full: zswap
// rejects stores past its max_pool_percent, zram past its disksize.
const poolFull = 95

// KindOf is the kind of a thrash from its evidence: the device or the
// pool where they hold back the swap-ins that dominate, else the fault
// kind that dominates.
func KindOf(e Evidence) Kind {
	swapIns := e.AnonFaultsPerSecond + e.ShmemFaultsPerSecond
	switch {
	case e.FileFaultsPerSecond > swapIns:
		return KindFile // the swap device and pool hold back no file's pages
	case swapIns > 0 && e.DeviceBusyPercent >= deviceBound:
		return KindDevice
	case swapIns > 0 && e.PoolFullPercent >= poolFull:
		return KindCompressedPool
	case e.ShmemFaultsPerSecond > e.AnonFaultsPerSecond:
		return KindShmem
	}
	return KindAnon
}

// summary is the evidence in a few words, for the one-line summary.
func (e Evidence) summary(k Kind) string {
	switch k {
	case KindFile:
		return fmt.Sprintf("%.0f page-cache faults/s", e.FileFaultsPerSecond)
	case KindDevice:
		return fmt.Sprintf("%.0f swap-ins/s on a device %.0f %% busy", e.AnonFaultsPerSecond+e.ShmemFaultsPerSecond, e.DeviceBusyPercent)
	case KindCompressedPool:
		return fmt.Sprintf("%.0f swap-ins/s, the compressed pool %.0f %% full", e.AnonFaultsPerSecond+e.ShmemFaultsPerSecond, e.PoolFullPercent)
	}
	return fmt.Sprintf("%.0f swap-ins/s", e.AnonFaultsPerSecond+e.ShmemFaultsPerSecond)
}
