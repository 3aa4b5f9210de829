// The run's emulated swap device: the kernel's I/O throttle on the disks
// under the host's swap, set on the run cgroup (memory and io on cgroup
// v2) or on the run's group in the v1 blkio hierarchy.

package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// emulateSwap throttles the swap devices for the run as its spec asks, and
// says what it emulated. With memory on cgroup v2 the run cgroup carries
// io.max, which holds swap-ins and swap-outs alike (the kernel charges a
// swap-out to the page's memory cgroup, the run's); with memory on v1 the
// run has a group in the v1 blkio hierarchy that its consumers join, which
// holds their swap-ins only. From Linux 6.12 io.max holds swap-outs only
// loosely, and the emulation's note says so. A host where neither can be
// set is an error naming why: a run never goes on without the device it
// asked for.
func emulateSwap(cfg execConfig, cg *cgroup.Cgroup) (*swapdev.Emulation, *cgroup.Cgroup, error) {
	spec := cfg.Spec.SwapDevice
	if spec.IsNone() {
		return nil, nil, nil
	}
	devs, err := swapdev.SwapDevices("/proc", "/sys")
	if err != nil {
		return nil, nil, err
	}
	var limits []cgroup.IOLimit
	for _, d := range devs {
		limits = append(limits, cgroup.IOLimit{Device: d.Number,
			ReadIOPS: spec.ReadIOPS, WriteIOPS: spec.WriteIOPS, ReadBPS: spec.ReadBPS, WriteBPS: spec.WriteBPS})
	}
	if cg.V2 {
		if err := cg.ThrottleIO(limits); err != nil {
			return nil, nil, err
		}
		e := &swapdev.Emulation{Devices: devs, Cgroup: cg.Path, Controller: "io",
			Throttled: []string{swapdev.Reads, swapdev.Writes}}
		var u unix.Utsname
		if err := unix.Uname(&u); err == nil && swapdev.SwapWritesInDebt(unix.ByteSliceToString(u.Release[:])) {
			e.Note = swapdev.NoteV2SwapWrites
		}
		return e, nil, nil
	}
	blkio, err := cgroup.OwnBlkio("/proc")
	if err != nil {
		return nil, nil, err
	}
	g, err := blkio.CreateIOGroup("run-" + cfg.ID)
	if err != nil {
		return nil, nil, err
	}
	if err := g.ThrottleIO(limits); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return nil, nil, errors.Join(err, g.Destroy(ctx))
	}
	return &swapdev.Emulation{Devices: devs, Cgroup: g.Path, Controller: "blkio",
		Throttled: []string{swapdev.Reads}, Note: swapdev.NoteV1Writes}, g, nil
}

// readIO adds to the record what the throttle passed on the swap devices.
func (r *execution) readIO() {
	if r.rec.SwapEmulation == nil {
		return
	}
	g := r.io
	if g == nil {
		g = r.cg
	}
	stats, err := g.IOStats()
	if err != nil {
		r.cfg.Logger.Warn("reading what the swap device's throttle passed", "run", r.cfg.ID, "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := *r.rec.SwapEmulation // a copy: Record's readers share the old one
	for _, d := range e.Devices {
		s := stats[d.Number]
		e.ReadIOs += s.ReadIOs
		e.WriteIOs += s.WriteIOs
		e.ReadBytes += s.ReadBytes
		e.WriteBytes += s.WriteBytes
	}
	r.rec.SwapEmulation = &e
}

// unthrottle lifts the swap device's throttle as the run's teardown
// begins: the plan is over, and consumers being killed, and reclaim for
// them, must not wait out a slow device's queue.
func (r *execution) unthrottle() {
	e := r.rec.SwapEmulation // set at Start; only readIO, on this goroutine, replaces it
	if e == nil {
		return
	}
	g := r.io
	if g == nil {
		g = r.cg
	}
	var devs []string
	for _, d := range e.Devices {
		devs = append(devs, d.Number)
	}
	if err := g.LiftIOThrottle(devs); err != nil {
		r.cfg.Logger.Warn("lifting the swap device's throttle for the teardown", "run", r.cfg.ID, "err", err)
	}
}

// destroyIO removes the run's v1 blkio group, if it has one.
func (r *execution) destroyIO(ctx context.Context) error {
	if r.io == nil {
		return nil
	}
	if err := r.io.Destroy(ctx); err != nil {
		return fmt.Errorf("the run's blkio group: %w", err)
	}
	return nil
}
