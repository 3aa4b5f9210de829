package settings

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/kernfile"
	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// The swap backends a run can name.
const (
	SwapDisk  = "disk"
	SwapZram  = "zram"
	SwapZswap = "zswap"
)

// zswapEnabled is zswap's switch; a kernel without CONFIG_ZSWAP lacks it.
const zswapEnabled = "/sys/module/zswap/parameters/enabled"

// zramPriority puts the run's zram device ahead of every other swap area.
const zramPriority = 32767

// minZramBytes is the least a zram device is sized to.
const minZramBytes = 64 << 20

// swap puts the host's swap on the backend asked: the disk's own areas
// with zswap off, those areas with zswap in front, or a free zram device
// ahead of them with zswap off.
func (a *applier) swap(backend string) error {
	areas, err := readSwaps(a.t.Root)
	if err != nil {
		return err
	}
	_, zswapErr := os.Stat(filepath.Join(a.t.Root, zswapEnabled))
	switch backend {
	case SwapDisk, SwapZswap:
		if err := diskFirst(areas); err != nil {
			return err
		}
		if backend == SwapZswap {
			if zswapErr != nil {
				return fmt.Errorf("this kernel has no %s (CONFIG_ZSWAP)", zswapEnabled)
			}
			return a.host("swap", zswapEnabled, "Y")
		}
	case SwapZram:
		if err := a.zram(areas); err != nil {
			return err
		}
	}
	if zswapErr != nil {
		return nil // no zswap to keep out of the way
	}
	return a.host("swap", zswapEnabled, "N")
}

// checkSwap says whether the host can swap on the backend: a disk swap
// area first for disk and zswap, zswap's switch for zswap, a free zram
// device for zram.
func checkSwap(root, backend string) error {
	areas, err := readSwaps(root)
	if err != nil {
		return err
	}
	switch backend {
	case SwapZram:
		dev, err := freeZram(root, areas)
		if err != nil {
			return err
		}
		return canSwapon(root, dev)
	case SwapZswap:
		if _, err := os.Stat(filepath.Join(root, zswapEnabled)); err != nil {
			return fmt.Errorf("this kernel has no %s (CONFIG_ZSWAP)", zswapEnabled)
		}
	}
	return diskFirst(areas)
}

// diskFirst checks that the host swaps to a disk area first: one exists,
// and no zram area comes before it.
func diskFirst(areas []swapArea) error {
	best, zram := -1<<31, -1<<31
	var zramName string
	for _, s := range areas {
		if isZram(s.name) {
			if s.prio > zram {
				zram, zramName = s.prio, s.name
			}
		} else {
			best = max(best, s.prio)
		}
	}
	switch {
	case best == -1<<31:
		return errNoSwap
	case zram >= best:
		return fmt.Errorf("the host swaps to %s (priority %d) before its disk: swapoff it for a run on disk swap", zramName, zram)
	}
	return nil
}

// zram makes a free zram device (disk size 0, not swap) a swap area ahead
// of the host's own, journalled first with the header's UUID and the size
// it is given, so that the end of the run, or the next process after a
// kill, takes it off and resets it while it is still the run's.
func (a *applier) zram(areas []swapArea) error {
	dev, err := freeZram(a.t.Root, areas)
	if err != nil {
		return err
	}
	node := "/dev/" + dev
	size := max(a.t.SwapBytes, minZramBytes)
	uuid := make([]byte, 16)
	_, _ = rand.Read(uuid)
	if err := a.j.swapon(node, size, uuid); err != nil {
		return err
	}
	a.rec.Zram = node
	if err := kernfile.WriteFile(filepath.Join(a.t.Root, "/sys/block", dev, "disksize"), []byte(strconv.FormatInt(size, 10))); err != nil {
		return fmt.Errorf("sizing %s: %w", node, err)
	}
	if err := mkswap(filepath.Join(a.t.Root, node), size, uuid); err != nil {
		return fmt.Errorf("making %s a swap area: %w", node, err)
	}
	if err := swapon(filepath.Join(a.t.Root, node), zramPriority); err != nil {
		return fmt.Errorf("swapon %s: %w", node, err)
	}
	return nil
}

// zramState reads what the zram device node (under root) holds: whether
// it is swap, its disk size, and its swap header's UUID.
func zramState(root, node string) (ZramState, error) {
	var st ZramState
	if !zramNode.MatchString(node) {
		return st, fmt.Errorf("%q is not a zram device", node)
	}
	areas, err := readSwaps(root)
	if err != nil {
		return st, err
	}
	st.Swap = slices.ContainsFunc(areas, func(s swapArea) bool { return s.name == node })
	b, err := os.ReadFile(filepath.Join(root, "/sys/block", filepath.Base(node), "disksize"))
	if err != nil {
		return st, err
	}
	if st.DiskSize, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
		return st, fmt.Errorf("%s's disk size %q: %w", node, b, err)
	}
	if st.DiskSize == 0 {
		return st, nil
	}
	f, err := os.Open(filepath.Join(root, node))
	if err != nil {
		return st, err
	}
	defer f.Close()
	h := make([]byte, os.Getpagesize())
	if _, err := io.ReadFull(f, h); err != nil {
		return st, fmt.Errorf("reading %s's swap header: %w", node, err)
	}
	if string(h[len(h)-10:]) == "SWAPSPACE2" {
		st.UUID = hex.EncodeToString(h[1036:1052])
	}
	return st, nil
}

// freeZram names a zram device with no disk size and not swap.
func freeZram(root string, areas []swapArea) (string, error) {
	devs, _ := filepath.Glob(filepath.Join(root, "/sys/block/zram*"))
	if len(devs) == 0 {
		return "", errors.New("this kernel has no zram device (CONFIG_ZRAM): modprobe zram")
	}
	for _, d := range devs {
		name := filepath.Base(d)
		b, err := os.ReadFile(filepath.Join(d, "disksize"))
		inUse := false
		for _, s := range areas {
			inUse = inUse || s.name == "/dev/"+name
		}
		if err == nil && strings.TrimSpace(string(b)) == "0" && !inUse {
			return name, nil
		}
	}
	return "", errors.New("no free zram device (each has a disk size or is swap): free one (swapoff /dev/zramN; echo 1 > /sys/block/zramN/reset) or add one (cat /sys/class/zram-control/hot_add)")
}

// capSysAdmin is CAP_SYS_ADMIN's bit in /proc/self/status's CapEff.
const capSysAdmin = 21

// canSwapon says whether this process can make the zram device dev swap:
// swapon(2) needs CAP_SYS_ADMIN, and the device node must be there (a
// systemd unit with PrivateDevices= has none). Asked before anything
// changes, so that a process that cannot is refused, not left with a sized
// device it cannot take off swap.
func canSwapon(root, dev string) error {
	if fi, err := os.Stat(filepath.Join(root, "/dev", dev)); err != nil || fi.Mode()&os.ModeDevice == 0 {
		return fmt.Errorf("no /dev/%s in this process's /dev (a container or a unit with PrivateDevices=): zram needs the host's device nodes", dev)
	}
	b, err := os.ReadFile(filepath.Join(root, "/proc/self/status"))
	if err != nil {
		return fmt.Errorf("reading this process's capabilities: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return fmt.Errorf("this process's capabilities %q: %w", v, err)
			}
			if caps&(1<<capSysAdmin) == 0 {
				return errors.New("swapon needs CAP_SYS_ADMIN, which this process lacks (the systemd unit bounds it out): run zram swap from a process that has it, or use disk or zswap")
			}
			return nil
		}
	}
	return errors.New("no CapEff line in /proc/self/status")
}

// mkswap writes a swap area's header (version 1) on a device of size
// bytes, as mkswap(8) does, with the given UUID.
func mkswap(node string, size int64, uuid []byte) error {
	page := os.Getpagesize()
	h := make([]byte, page)
	binary.LittleEndian.PutUint32(h[1024:], 1)                          // version
	binary.LittleEndian.PutUint32(h[1028:], uint32(size/int64(page)-1)) // last page
	copy(h[1036:1052], uuid)
	copy(h[page-10:], "SWAPSPACE2")
	f, err := os.OpenFile(node, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(h, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// swapon makes node a swap area of priority prio.
func swapon(node string, prio int) error {
	p, err := unix.BytePtrFromString(node)
	if err != nil {
		return err
	}
	const preferFlag = 0x8000 // SWAP_FLAG_PREFER
	_, _, errno := unix.Syscall(unix.SYS_SWAPON, uintptr(unsafe.Pointer(p)), uintptr(preferFlag|prio&0x7fff), 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// swapoff takes node off swap; a node that is not swap is no error.
func swapoff(node string) error {
	p, err := unix.BytePtrFromString(node)
	if err != nil {
		return err
	}
	_, _, errno := unix.Syscall(unix.SYS_SWAPOFF, uintptr(unsafe.Pointer(p)), 0, 0)
	if errno != 0 && errno != unix.EINVAL {
		return fmt.Errorf("swapoff %s: %w", node, errno)
	}
	return nil
}

// swapArea is one line of /proc/swaps.
type swapArea struct {
	name string
	prio int
}

// readSwaps reads /proc/swaps.
func readSwaps(root string) ([]swapArea, error) {
	b, err := os.ReadFile(filepath.Join(root, "/proc/swaps"))
	if err != nil {
		return nil, fmt.Errorf("this kernel has no /proc/swaps (CONFIG_SWAP): %w", err)
	}
	var out []swapArea
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		p, _ := strconv.Atoi(f[4])
		out = append(out, swapArea{name: f[0], prio: p})
	}
	return out, nil
}

// swapAreaLines are the swap areas, each "name priority N".
func swapAreaLines(root string) []string {
	areas, _ := readSwaps(root)
	var out []string
	for _, s := range areas {
		out = append(out, fmt.Sprintf("%s priority %d", s.name, s.prio))
	}
	return out
}

func isZram(name string) bool { return strings.HasPrefix(name, "/dev/zram") }

// CostNames are the cost figures a record may hold: zram's (its mm_stat
// when it held the most: the data stored, its compressed size, the memory
// the device took, and their ratio) and zswap's (/proc/vmstat's pages it
// stored, loaded and wrote back over the run, and /proc/meminfo's pool at
// its largest).
var CostNames = []string{
	"zram_orig_data_bytes", "zram_compr_data_bytes", "zram_mem_used_bytes", "zram_compression_ratio",
	"zswap_stored_pages", "zswap_loaded_pages", "zswap_written_back_pages", "zswap_pool_bytes", "zswapped_bytes",
	"swap_disk_read_bytes", "swap_disk_written_bytes",
}

// Sample reads what the run's compressed swap holds now, keeping the most
// it held: by the run's end its consumers, gone, hold nothing.
func (j *Journal) Sample() {
	if j == nil || j.applied == nil {
		return
	}
	a := j.applied
	j.sampleMu.Lock()
	defer j.sampleMu.Unlock()
	if a.peak == nil {
		a.peak = map[string]float64{}
	}
	if a.rec.Zram != "" {
		b, err := os.ReadFile(filepath.Join(a.t.Root, "/sys/block", filepath.Base(a.rec.Zram), "mm_stat"))
		if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
			orig, _ := strconv.ParseFloat(f[0], 64)
			if orig > a.peak["zram_orig_data_bytes"] {
				a.peak["zram_orig_data_bytes"] = orig
				a.peak["zram_compr_data_bytes"], _ = strconv.ParseFloat(f[1], 64)
				a.peak["zram_mem_used_bytes"], _ = strconv.ParseFloat(f[2], 64)
			}
		}
	}
	if a.zswap() {
		b, _ := os.ReadFile(filepath.Join(a.t.Root, "/proc/meminfo"))
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			name := map[string]string{"Zswap:": "zswap_pool_bytes", "Zswapped:": "zswapped_bytes"}[firstOf(f)]
			if name != "" && len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				a.peak[name] = max(a.peak[name], kb*1024)
			}
		}
	}
}

func firstOf(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// zswap says whether the run swapped through zswap.
func (a *applier) zswap() bool {
	return a.rec.Asked.Value("swap") == SwapZswap || a.rec.Asked.Value("zswap") == "Y"
}

// cost is what the run's compressed swap held at most and did.
func (a *applier) cost() map[string]float64 {
	a.j.Sample()
	a.j.sampleMu.Lock()
	defer a.j.sampleMu.Unlock()
	out := map[string]float64{}
	for k, v := range a.peak {
		out[k] = v
	}
	if c := out["zram_compr_data_bytes"]; c > 0 {
		out["zram_compression_ratio"] = out["zram_orig_data_bytes"] / c
	}
	if len(a.disks) > 0 {
		now := diskIO(a.t.Root, a.disks)
		for k, v := range now {
			out[k] = v - a.disk[k]
		}
	}
	if a.zswap() {
		now := readVMStat(a.t.Root)
		for k, name := range map[string]string{"zswpout": "zswap_stored_pages", "zswpin": "zswap_loaded_pages", "zswpwb": "zswap_written_back_pages"} {
			if v, ok := now[k]; ok {
				out[name] = v - a.vmstat[k]
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// swapDisks are the disks (MAJ:MIN) under the host's disk swap areas.
func swapDisks(root string) []string {
	devs, _ := swapdev.SwapDevices(filepath.Join(root, "/proc"), filepath.Join(root, "/sys"))
	var out []string
	for _, d := range devs {
		if !isZram(d.Swap) && !slices.Contains(out, d.Number) {
			out = append(out, d.Number)
		}
	}
	return out
}

// diskIO is what the disks have read and written (their stat's sectors,
// in bytes): every I/O of the disk, the swap's and any other.
func diskIO(root string, disks []string) map[string]float64 {
	out := map[string]float64{"swap_disk_read_bytes": 0, "swap_disk_written_bytes": 0}
	for _, d := range disks {
		b, err := os.ReadFile(filepath.Join(root, "/sys/dev/block", d, "stat"))
		f := strings.Fields(string(b))
		if err != nil || len(f) < 7 {
			continue
		}
		r, _ := strconv.ParseFloat(f[2], 64)
		w, _ := strconv.ParseFloat(f[6], 64)
		out["swap_disk_read_bytes"] += r * 512
		out["swap_disk_written_bytes"] += w * 512
	}
	return out
}

// readVMStat is /proc/vmstat's zswap counters.
func readVMStat(root string) map[string]float64 {
	b, _ := os.ReadFile(filepath.Join(root, "/proc/vmstat"))
	out := map[string]float64{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, " ")
		if ok && strings.HasPrefix(k, "zswp") {
			out[k], _ = strconv.ParseFloat(v, 64)
		}
	}
	return out
}
