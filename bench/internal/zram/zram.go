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
	"sync"
	"time"
)

// swapoffFor is how long undo retries a swapoff that failed: it fails with
// ENOMEM while the groups whose pages it would bring back sit at their
// limits (a neighbour locked in memory beside thrashing consumers).
const swapoffFor = 15 * time.Second

// given holds the devices made swap whose undo has not yet succeeded.
var given = struct {
	sync.Mutex
	undo map[string]func() error
}{undo: map[string]func() error{}}

// GiveBackAll undoes every device made swap whose undo has not succeeded
// yet, retrying as undo does: a scenario calls it last, once its processes
// are stopped and their memory freed, so that nothing is left swapping.
func GiveBackAll() error {
	given.Lock()
	defer given.Unlock()
	var errs []error
	for dev, undo := range given.undo {
		if err := undo(); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(given.undo, dev)
	}
	return errors.Join(errs...)
}

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
	giveBack := func() error {
		if swapOn(node) {
			var out []byte
			var err error
			for end := time.Now().Add(swapoffFor); ; time.Sleep(500 * time.Millisecond) {
				if out, err = exec.Command("swapoff", node).CombinedOutput(); err == nil || time.Now().After(end) {
					break
				}
			}
			if err != nil {
				return fmt.Errorf("swapoff %s: %w: %s (GiveBackAll retries it)", node, err, out)
			}
		}
		return os.WriteFile(filepath.Join(sys, "reset"), []byte("1"), 0)
	}
	given.Lock()
	given.undo[dev] = giveBack
	given.Unlock()
	undo = func() error {
		err := giveBack()
		if err == nil {
			given.Lock()
			delete(given.undo, dev)
			given.Unlock()
		}
		return err
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
