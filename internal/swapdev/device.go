package swapdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	promprocfs "github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Device is a block device a run's throttle is keyed on: the whole disk
// under an active swap area (the kernel's I/O throttle takes no partition).
type Device struct {
	// Number is the disk's MAJ:MIN, as io.max and blkio.throttle take it.
	Number string `json:"device"`
	// Swap is the swap file or partition on it.
	Swap string `json:"swap"`
}

// ErrNoSwap is the host without an active swap area.
var ErrNoSwap = errors.New("no swap is on: a swap device throttles swap; swapon a file or partition first (docs/deploy.md)")

// SwapDevices finds the whole disks under the host's active swap areas, from
// procRoot's swaps and sysRoot's block devices (normally /proc and /sys):
// a swap partition's disk, or the disk of the file system a swap file is
// on. A swap area with no block device of its own to throttle (a file on
// btrfs, whose device number is the file system's, not a disk's) is an
// error naming it: a throttle keyed on the others would emulate part of the
// swap and say it emulated all.
func SwapDevices(procRoot, sysRoot string) ([]Device, error) {
	fs, err := promprocfs.NewFS(procRoot)
	if err != nil {
		return nil, fmt.Errorf("reading the swap areas: %w", err)
	}
	swaps, err := fs.Swaps()
	if err != nil {
		return nil, fmt.Errorf("reading the swap areas: %w", err)
	}
	var devs []Device
	for _, s := range swaps {
		name := Unescape(s.Filename)
		num, err := DiskOf(sysRoot, name, s.Type)
		if err != nil {
			return nil, fmt.Errorf("swap %s: %w", name, err)
		}
		if !slices.ContainsFunc(devs, func(d Device) bool { return d.Number == num }) {
			devs = append(devs, Device{Number: num, Swap: name})
		}
	}
	if len(devs) == 0 {
		return nil, ErrNoSwap
	}
	return devs, nil
}

// DiskOf is the MAJ:MIN of the whole disk a swap area named as
// /proc/swaps names it (its Filename unescaped), of its Type, does its I/O
// on.
func DiskOf(sysRoot, name, kind string) (string, error) {
	num, err := deviceOf(name, kind)
	if err != nil {
		return "", err
	}
	return wholeDisk(sysRoot, num)
}

// deviceOf is the device number a swap area does its I/O on: a
// partition's own, or the file system's under a file.
func deviceOf(name, kind string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(name, &st); err != nil {
		return "", fmt.Errorf("stat: %w", err)
	}
	dev := st.Dev
	if kind == "partition" {
		dev = st.Rdev
	}
	major, minor := unix.Major(dev), unix.Minor(dev)
	if major == 0 {
		return "", fmt.Errorf("on a file system with no block device of its own (device %d:%d; btrfs and the like): its I/O cannot be throttled by device; swap to a file on a plain block device, or a partition", major, minor)
	}
	return fmt.Sprintf("%d:%d", major, minor), nil
}

// wholeDisk is the disk a partition is on; a whole disk (a dm, zram or
// loop device too) is itself.
func wholeDisk(sysRoot, num string) (string, error) {
	// /sys/dev/block/MAJ:MIN links to the device's directory, which a
	// partition's is inside its disk's.
	dir, err := filepath.EvalSymlinks(filepath.Join(sysRoot, "dev", "block", num))
	if err != nil {
		return "", fmt.Errorf("block device %s: %w", num, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "partition")); err != nil {
		return num, nil
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(dir), "dev"))
	if err != nil {
		return "", fmt.Errorf("the disk of partition %s: %w", num, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Unescape undoes /proc/swaps' octal escapes (\040 for a space).
func Unescape(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}
