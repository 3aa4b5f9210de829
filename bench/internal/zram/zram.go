// Package zram makes a free zram device swap for a benchmark's scenario,
// ahead of the host's own, and gives it back.
package zram

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Swap makes a free zram device (disk size 0, not swap) a swap area ahead
// of the host's own (the highest priority), compressing with lz4; undo
// takes it off and resets the device, whatever happened.
func Swap() (undo func() error, err error) {
	dev, err := freeZram()
	if err != nil {
		return nil, err
	}
	sys := filepath.Join("/sys/block", dev)
	node := "/dev/" + dev
	undo = func() error {
		var errs []error
		if swapOn(node) {
			if out, err := exec.Command("swapoff", node).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("swapoff %s: %w: %s", node, err, out))
			}
		}
		errs = append(errs, os.WriteFile(filepath.Join(sys, "reset"), []byte("1"), 0))
		return errors.Join(errs...)
	}
	_ = os.WriteFile(filepath.Join(sys, "comp_algorithm"), []byte("lz4"), 0) // else the kernel's default
	steps := [][]string{{"mkswap", node}, {"swapon", "-p", "32767", node}}
	if err := os.WriteFile(filepath.Join(sys, "disksize"), []byte("1G"), 0); err != nil {
		return nil, errors.Join(fmt.Errorf("sizing %s: %w", dev, err), undo())
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return nil, errors.Join(fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, out), undo())
		}
	}
	return undo, nil
}

// freeZram names a zram device with no disk size and not in use as swap.
func freeZram() (string, error) {
	devs, _ := filepath.Glob("/sys/block/zram*")
	for _, d := range devs {
		b, err := os.ReadFile(filepath.Join(d, "disksize"))
		if err == nil && strings.TrimSpace(string(b)) == "0" && !swapOn("/dev/"+filepath.Base(d)) {
			return filepath.Base(d), nil
		}
	}
	return "", errors.New("no free zram device (none with disksize 0): load the zram module (modprobe zram) or free one (swapoff /dev/zramN; echo 1 > /sys/block/zramN/reset)")
}

func swapOn(node string) bool {
	b, _ := os.ReadFile("/proc/swaps")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == node {
			return true
		}
	}
	return false
}
