// Package swapstate reads where swapped pages go, and how close that is to
// its limit: the busiest disk under the host's swap areas (the share of
// time it has I/O in flight) and the fullest compressed pool (zswap's
// against max_pool_percent of memory, a zram swap area's against its size
// and mem_limit). A diagnosis names a device-bound or compressed-pool
// thrash from them; every figure is the kernel's own, from /proc and /sys.
package swapstate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	promprocfs "github.com/prometheus/procfs"
	"github.com/prometheus/procfs/blockdevice"

	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// State is the swap's state over the interval since the last read.
type State struct {
	// DeviceBusyPercent is the busiest disk's share of the interval with
	// I/O in flight (io_ticks), -1 unknown: a first read, or no swap area
	// on a disk (zram is a pool, not a disk).
	DeviceBusyPercent float64
	// Device is that disk's name (vdb, sda).
	Device string
	// PoolFullPercent is the fullest compressed pool against its bound,
	// -1 with none.
	PoolFullPercent float64
	// Pool names it: "zswap" or a zram device.
	Pool string
}

// Unknown is the state with nothing read.
var Unknown = State{DeviceBusyPercent: -1, PoolFullPercent: -1}

// Reader reads the state, keeping each disk's io_ticks between reads.
type Reader struct {
	proc, sys string
	// diskOf finds the disk under a swap area: swapdev.DiskOf.
	diskOf func(sysRoot, name, kind string) (string, error)
	prevAt time.Time
	prev   map[string]uint64 // io_ticks by disk name
	// disks is the disk under each swap area ("" for none: zram, a file
	// system without a disk), found once while the area stays: finding it
	// stats the area and follows /sys/dev/block's links, every sample.
	disks map[areaKey]string
}

type areaKey struct{ name, kind string }

// NewReader reads under procRoot and sysRoot (normally /proc and /sys).
func NewReader(procRoot, sysRoot string) *Reader {
	return &Reader{proc: procRoot, sys: sysRoot, diskOf: swapdev.DiskOf, prev: map[string]uint64{}, disks: map[areaKey]string{}}
}

// Reset forgets the last read: the next one starts an interval.
func (r *Reader) Reset() {
	r.prevAt = time.Time{}
	clear(r.prev)
	clear(r.disks)
}

// Read is the state at now. What cannot be read is left unknown: a swap
// area gone between reads, a file system with no disk of its own.
func (r *Reader) Read(now time.Time) State {
	st := Unknown
	fs, err := promprocfs.NewFS(r.proc)
	if err != nil {
		return st
	}
	swaps, err := fs.Swaps()
	if err != nil {
		return st
	}
	st.PoolFullPercent, st.Pool = r.zram(swaps)
	if pct, ok := r.zswap(fs); ok && pct > st.PoolFullPercent {
		st.PoolFullPercent, st.Pool = pct, "zswap"
	}
	ticks := r.diskTicks(swaps)
	if dt := now.Sub(r.prevAt); !r.prevAt.IsZero() && dt > 0 {
		for name, t := range ticks {
			p, ok := r.prev[name]
			if !ok || t < p {
				continue
			}
			if busy := min(100, float64(t-p)/float64(dt.Milliseconds())*100); busy > st.DeviceBusyPercent {
				st.DeviceBusyPercent, st.Device = busy, name
			}
		}
	}
	r.prevAt, r.prev = now, ticks
	return st
}

// diskTicks is the io_ticks of each disk under a swap area that is not
// zram's; an area whose disk cannot be found (a file on btrfs) is left out.
func (r *Reader) diskTicks(swaps []*promprocfs.Swap) map[string]uint64 {
	out := map[string]uint64{}
	bfs, err := blockdevice.NewFS(r.proc, r.sys)
	if err != nil {
		return out
	}
	seen := map[areaKey]bool{}
	for _, s := range swaps {
		k := areaKey{swapdev.Unescape(s.Filename), s.Type}
		seen[k] = true
		name, ok := r.disks[k]
		if !ok {
			name = r.diskUnder(k)
			r.disks[k] = name
		}
		if name == "" {
			continue
		}
		if st, _, err := bfs.SysBlockDeviceStat(name); err == nil {
			out[name] = st.IOsTotalTicks
		}
	}
	for k := range r.disks {
		if !seen[k] {
			delete(r.disks, k)
		}
	}
	return out
}

// diskUnder is the disk under the swap area k, "" for a zram device or
// where none can be found (a file on btrfs).
func (r *Reader) diskUnder(k areaKey) string {
	num, err := r.diskOf(r.sys, k.name, k.kind)
	if err != nil {
		return ""
	}
	dir, err := filepath.EvalSymlinks(filepath.Join(r.sys, "dev", "block", num))
	if err != nil {
		return ""
	}
	name := filepath.Base(dir)
	if strings.HasPrefix(name, "zram") {
		return ""
	}
	return name
}

// zram is the fullest zram swap area's fill: its used share of its size
// (the swap area is the device's disksize), or its memory against the
// device's mem_limit where one is set.
func (r *Reader) zram(swaps []*promprocfs.Swap) (float64, string) {
	best, name := -1.0, ""
	for _, s := range swaps {
		dev := filepath.Base(s.Filename)
		if s.Type != "partition" || !strings.HasPrefix(dev, "zram") || s.Size <= 0 {
			continue
		}
		pct := float64(s.Used) / float64(s.Size) * 100
		if used, limit, err := zramMemory(filepath.Join(r.sys, "block", dev, "mm_stat")); err == nil && limit > 0 {
			pct = max(pct, float64(used)/float64(limit)*100)
		}
		if pct > best {
			best, name = pct, dev
		}
	}
	return best, name
}

// zramMemory reads a zram device's mem_used_total and mem_limit (the
// third and fourth fields of mm_stat).
func zramMemory(path string) (used, limit uint64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0, 0, fmt.Errorf("%s: %d fields, want at least 4", path, len(f))
	}
	if used, err = strconv.ParseUint(f[2], 10, 64); err == nil {
		limit, err = strconv.ParseUint(f[3], 10, 64)
	}
	return used, limit, err
}

// zswap is zswap's pool against its bound, max_pool_percent of the
// memory, when zswap is on and the kernel reports its pool in meminfo
// (Zswap:, Linux 5.19+).
func (r *Reader) zswap(fs promprocfs.FS) (float64, bool) {
	params := filepath.Join(r.sys, "module", "zswap", "parameters")
	on, err := os.ReadFile(filepath.Join(params, "enabled"))
	if err != nil || !bytes.HasPrefix(bytes.TrimSpace(on), []byte("Y")) {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(params, "max_pool_percent"))
	if err != nil {
		return 0, false
	}
	maxPct, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil || maxPct <= 0 {
		return 0, false
	}
	m, err := fs.Meminfo()
	if err != nil || m.ZswapBytes == nil || m.MemTotalBytes == nil || *m.MemTotalBytes == 0 {
		return 0, false
	}
	return float64(*m.ZswapBytes) / (float64(*m.MemTotalBytes) * maxPct / 100) * 100, true
}
