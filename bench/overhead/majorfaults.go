package main

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The major-fault workloads exercise what the observer's fault probes exist
// for: every op is one major fault, served from a file's blocks or from
// swap. Their op is far slower than a minor fault (tens of microseconds of
// I/O), so a probe can hide in it; the target holds the probes' own time to
// 1 µs a fault all together, and the paired A/B slowdown to 5 %.

// majorFaultRegionBytes is the file or region a major-fault workload pages
// through: many faults per pass, a few seconds of I/O.
const majorFaultRegionBytes = 64 << 20

// swapinLimitBytes is the memory cgroup limit the swapin workload runs in:
// half its region, so that every other page it reads is in swap.
const swapinLimitBytes = majorFaultRegionBytes / 2

// faultCheckEvery is how many page touches run between deadline checks.
const faultCheckEvery = 256

// regionBytes is the major-fault workloads' region: majorFaultRegionBytes,
// or a child's --region (the cost curves run many small ones at once).
var regionBytes = majorFaultRegionBytes

// touches paces a child's page touches at its --rate, when it has one.
var touches *pacer

// runFileMajor takes file major faults from a dropped cache: each pass drops
// a file's pages (fadvise DONTNEED, which a file's owner may do without
// privileges), maps it with MADV_RANDOM (no readahead, no fault-around) and
// reads one byte of each page in a shuffled order, so every touch is one
// page-cache miss. Ops are major faults, from getrusage.
func runFileMajor(warmup, duration time.Duration, started func()) (uint64, time.Duration, error) {
	path, cleanup, err := majorFaultFile()
	if err != nil {
		return 0, 0, err
	}
	defer cleanup()
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	pages := regionBytes / unix.Getpagesize()
	order := shuffledPages(pages)
	pass := func(deadline time.Time) (bool, error) {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			return false, fmt.Errorf("dropping the file's cache: %w", err)
		}
		mem, err := unix.Mmap(int(f.Fd()), 0, regionBytes, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return false, fmt.Errorf("mapping %s: %w", path, err)
		}
		defer unix.Munmap(mem)
		if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
			return false, fmt.Errorf("madvise(MADV_RANDOM): %w", err)
		}
		return touchUntil(mem, order, deadline), nil
	}
	return timeMajorFaults(warmup, duration, started, pass)
}

// runSwapin takes swap-in major faults in a memory-limited cgroup, as a
// thrashing process does: it fills a region twice the cgroup's limit with
// incompressible bytes, then reads one byte of its pages in a shuffled
// order, again and again. Every page read that reclaim had pushed out is a
// swap-in, and each makes room for itself by memcg reclaim. The benchmark
// puts the child in such a cgroup (--cgroup); without one, nothing is
// swapped and the run fails for lack of faults. Ops are major faults, from
// getrusage.
func runSwapin(warmup, duration time.Duration, started func()) (uint64, time.Duration, error) {
	mem, err := unix.Mmap(-1, 0, regionBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0, 0, fmt.Errorf("mapping %d bytes: %w", regionBytes, err)
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem, unix.MADV_NOHUGEPAGE); err != nil && !errors.Is(err, unix.EINVAL) {
		return 0, 0, fmt.Errorf("madvise(MADV_NOHUGEPAGE): %w", err)
	}
	fillAndPageOut(mem)
	order := shuffledPages(regionBytes / unix.Getpagesize())
	pass := func(deadline time.Time) (bool, error) { return touchUntil(mem, order, deadline), nil }
	ops, elapsed, err := timeMajorFaults(warmup, duration, started, pass)
	if err == nil && ops == 0 {
		err = errors.New("no major faults: run swapin in a memory cgroup smaller than its region (the benchmark passes --cgroup), with swap on")
	}
	return ops, elapsed, err
}

// fillAndPageOut writes incompressible bytes over mem from user space, a
// chunk at a time, and pages each chunk out once written. Filled in one
// go (getrandom into the whole region), the region's dirty pages came
// faster than the cgroup could write them to swap, and memcg reclaim,
// finding nothing it could free in its retries, could OOM-kill the
// workload. Paged out as it goes, the fill
// stays under the limit; the passes then fault the pages back from swap.
func fillAndPageOut(mem []byte) {
	const chunk = 1 << 20
	r := mathrand.New(mathrand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	for off := 0; off < len(mem); off += chunk {
		part := mem[off:min(off+chunk, len(mem))]
		for i := 0; i+8 <= len(part); i += 8 {
			binary.LittleEndian.PutUint64(part[i:], r.Uint64())
		}
		_ = unix.Madvise(part, unix.MADV_PAGEOUT) // a kernel without it (before 5.4) leaves the limit to reclaim
	}
}

// timeMajorFaults runs passes through warm-up, then through the measured
// window, and counts the major faults in the window.
func timeMajorFaults(warmup, duration time.Duration, started func(), pass func(deadline time.Time) (bool, error)) (uint64, time.Duration, error) {
	for end := time.Now().Add(warmup); time.Now().Before(end) && !stopped.Load(); {
		if _, err := pass(end); err != nil {
			return 0, 0, err
		}
	}
	started()
	before, err := majorFaults()
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	end := start.Add(duration)
	for {
		done, err := pass(end)
		if err != nil {
			return 0, 0, err
		}
		if done {
			break
		}
	}
	elapsed := time.Since(start)
	after, err := majorFaults()
	if err != nil {
		return 0, 0, err
	}
	return after - before, elapsed, nil
}

// touchUntil reads one byte of each page of mem in order, and reports
// whether the deadline passed before the end.
func touchUntil(mem []byte, order []int32, deadline time.Time) bool {
	pageSize := unix.Getpagesize()
	var sum byte
	for i, pg := range order {
		sum += mem[int(pg)*pageSize]
		touches.wait()
		if i%faultCheckEvery == 0 && (!time.Now().Before(deadline) || stopped.Load()) {
			faultSink = sum
			return true
		}
	}
	faultSink = sum
	return false
}

// faultSink keeps the compiler from dropping reads whose value is unused.
var faultSink byte

// shuffledPages is 0..n-1 in a random order: no readahead pattern to find.
func shuffledPages(n int) []int32 {
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	var b [4]byte
	for i := n - 1; i > 0; i-- {
		_, _ = rand.Read(b[:])
		j := int(uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24) % (i + 1)
		order[i], order[j] = order[j], order[i]
	}
	return order
}

// majorFaults is this process's major faults so far (all threads).
func majorFaults() (uint64, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return uint64(ru.Majflt), nil
}

// majorFaultFile writes majorFaultRegionBytes of random bytes to a file on a
// disk (not a tmpfs, whose pages cannot be dropped) and syncs it, so its
// clean pages can be dropped and read back.
func majorFaultFile() (string, func(), error) {
	dir, err := os.MkdirTemp("/var/tmp", "thrashscope-bench-")
	if err != nil {
		return "", nil, fmt.Errorf("making a directory on disk for the file workload: %w", err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Type == unix.TMPFS_MAGIC {
		cleanup()
		return "", nil, errors.New("/var/tmp is a tmpfs, whose pages cannot be dropped: the file workload needs a disk there")
	}
	path := filepath.Join(dir, "pages.dat")
	buf := make([]byte, regionBytes)
	_, _ = rand.Read(buf)
	f, err := os.Create(path)
	if err == nil {
		_, err = f.Write(buf)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("writing the file workload's file: %w", err)
	}
	return path, cleanup, nil
}

// joinCgroup moves this process into the cgroup at dir, before a workload
// allocates anything.
func joinCgroup(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0); err != nil {
		return fmt.Errorf("joining cgroup %s: %w", dir, err)
	}
	return nil
}
