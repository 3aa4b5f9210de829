package swapdev

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// Directions a throttle can hold.
const (
	Reads  = "reads"
	Writes = "writes"
)

// NoteV1Writes is why cgroup v1 throttles a run's swap-ins only.
const NoteV1Writes = "swap-ins are throttled, swap-outs are not: the kernel charges a swap-out write to the I/O group of the page's memory cgroup, which, with memory on cgroup v1, is the root's (the consumers' other reads from these disks are throttled too)"

// NoteV2SwapWrites is why, from Linux 6.12, io.max holds a run's swap-outs
// loosely: blk-throttle lets I/O that could invert priorities (swap and
// metadata writes) past a limit at once, charging it to the writes that
// follow, and drops the charge when the writes pause long enough for a new
// slice.
const NoteV2SwapWrites = "swap-ins are held to the device's rate; swap-outs only loosely: from Linux 6.12 the kernel lets a swap write past io.max at once, charged as a debt the writes after it pay, and forgets the debt once the writes pause, so bursts of swap-outs can pass the device's write rate (the record's write_ios says what passed)"

// SwapWritesInDebt says whether a kernel release (uname -r) lets swap
// writes past io.max in debt: blk-throttle does from Linux 6.12.
func SwapWritesInDebt(release string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 6 || (major == 6 && minor >= 12)
}

// Emulation is what a run's swap device was on this host: the disks
// throttled, where, which directions, and what the throttle passed.
type Emulation struct {
	Devices []Device `json:"devices"`
	// Cgroup is where the throttle is set: the run cgroup (io.max), or the
	// run's group in the v1 blkio hierarchy.
	Cgroup string `json:"cgroup"`
	// Controller is "io" (cgroup v2's io.max) or "blkio" (cgroup v1's
	// blkio.throttle).
	Controller string `json:"controller"`
	// Throttled lists the directions held to the limits: reads, writes.
	Throttled []string `json:"throttled"`
	// Note says what is not emulated here, or only loosely, and why.
	Note string `json:"note,omitempty"`
	// The I/Os and bytes the throttle passed on the devices over the run,
	// read as it ended: the kernel's own count, to check the rates by.
	ReadIOs    uint64 `json:"read_ios"`
	WriteIOs   uint64 `json:"write_ios"`
	ReadBytes  uint64 `json:"read_bytes"`
	WriteBytes uint64 `json:"write_bytes"`
}

// Summary is the emulation in a line: "reads and writes throttled on
// 254:0 (io.max)".
func (e Emulation) Summary() string {
	what := strings.Join(e.Throttled, " and ") + " throttled"
	var devs []string
	for _, d := range e.Devices {
		devs = append(devs, d.Number)
	}
	s := fmt.Sprintf("%s on %s (%s)", what, strings.Join(devs, ", "), e.Controller)
	switch {
	case !slices.Contains(e.Throttled, Writes):
		s += "; swap-outs not throttled on cgroup v1"
	case e.Note == NoteV2SwapWrites:
		s += "; swap-outs held loosely (the kernel lets swap writes pass in debt)"
	}
	return s
}

// Validate checks an emulation read back from a record.
func (e Emulation) Validate() error {
	if len(e.Devices) == 0 || len(e.Devices) > 64 {
		return fmt.Errorf("devices: %d, want 1 to 64", len(e.Devices))
	}
	for i, d := range e.Devices {
		if err := text(fmt.Sprintf("devices[%d].device", i), d.Number, 32); err != nil {
			return err
		}
		if err := text(fmt.Sprintf("devices[%d].swap", i), d.Swap, 4096); err != nil {
			return err
		}
	}
	if err := text("cgroup", e.Cgroup, 4096); err != nil {
		return err
	}
	if err := text("note", e.Note, 4096); err != nil {
		return err
	}
	if e.Controller != "io" && e.Controller != "blkio" {
		return fmt.Errorf("controller %q: want io or blkio", strictjson.Clip(e.Controller))
	}
	if len(e.Throttled) == 0 || len(e.Throttled) > 2 {
		return fmt.Errorf("throttled: %d directions, want 1 or 2", len(e.Throttled))
	}
	for _, d := range e.Throttled {
		if d != Reads && d != Writes {
			return fmt.Errorf("throttled %q: want reads or writes", strictjson.Clip(d))
		}
	}
	return nil
}

func text(field, s string, max int) error {
	if len(s) > max || strings.ContainsFunc(s, unicode.IsControl) || !utf8.ValidString(s) {
		return fmt.Errorf("%s: want text of at most %d bytes of valid UTF-8 without control characters", field, max)
	}
	return nil
}
