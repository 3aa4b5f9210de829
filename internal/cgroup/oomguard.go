package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/kernfile"
)

// OOMGuard does the reclaim the kernel gives up on when every page of a
// memcg is written (reclaim finds nothing unreferenced in 16 tries with
// swap still free, and the kernel OOM-kills a consumer).
//
// On v1 the cgroup's OOM killer is off: a failed charge parks its task, and
// the guard, woken by the cgroup's OOM event, lowers the limit by a slack
// and raises it again, so the kernel reclaims the slack in the guard's
// thread while the parked tasks touch nothing. v2 has no such switch: the
// guard sets memory.high a slack below memory.max, so a growing cgroup is
// throttled before a charge fails, and past high by half the slack it
// reclaims the slack itself through memory.reclaim (Linux 5.19+). Each
// such reclaim is a rescue. Below that mark it leaves reclaim to the tasks,
// so their stall and the cgroup's PSI stay theirs (docs/runs.md, The OOM
// guard).
type OOMGuard struct {
	c            *Cgroup
	limit, slack int64
	// ev is the OOM event (v1: an eventfd) or inotify on memory.events
	// (v2), non-blocking, so the loop waits for it in Go's netpoller: a
	// wait in poll(2) would hold a thread in a system call and keep the
	// runtime's monitor thread waking every 20 µs to take its P back.
	ev *os.File
	// reclaim: memory.reclaim exists (v2); without it the guard only
	// throttles.
	reclaim bool
	rescues atomic.Uint64
	// cpu is the guard's own CPU time, in ns, from a wake to its next
	// wait: the reclaim it does for the run's tasks, which the kernel
	// charges to the thread that writes the limit (this process).
	cpu        atomic.Int64
	stop, done chan struct{}
	// files keeps the files the loop polls open (its goroutine's alone).
	files kernfile.Set
}

// guardSlack is what a rescue reclaims: 1/256 of the limit (4 MiB of 1 GiB),
// at least 1 MiB, in whole pages.
func guardSlack(limit int64) int64 {
	s := max(limit/256, 1<<20)
	return s &^ 4095
}

// GuardOOM starts the guard: on cgroup v1 it turns the cgroup's OOM killer
// off, on v2 it sets memory.high under memory.max. Close it when the run's
// processes are gone.
func (c *Cgroup) GuardOOM(limit int64) (*OOMGuard, error) {
	if err := c.owned(); err != nil {
		return nil, err
	}
	slack := guardSlack(limit)
	if limit <= 2*slack {
		return nil, fmt.Errorf("OOM guard: a limit of %d bytes leaves no room for a %d-byte reclaim", limit, slack)
	}
	if c.V2 {
		return c.guardV2(limit, slack)
	}
	control := filepath.Join(c.Path, "memory.oom_control")
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("OOM guard: eventfd: %w", err)
	}
	// The event registration holds its own reference to the control file.
	ofd, err := os.Open(control)
	if err != nil {
		unix.Close(efd)
		return nil, fmt.Errorf("OOM guard: %w", err)
	}
	defer ofd.Close()
	reg := fmt.Sprintf("%d %d", efd, ofd.Fd())
	if err := kernfile.WriteFile(filepath.Join(c.Path, "cgroup.event_control"), []byte(reg)); err != nil {
		unix.Close(efd)
		return nil, fmt.Errorf("OOM guard: registering for OOM events in %s: %w", c.Path, err)
	}
	if err := kernfile.WriteFile(control, []byte("1")); err != nil {
		unix.Close(efd)
		return nil, fmt.Errorf("OOM guard: turning the OOM killer off in %s: %w", c.Path, hint(err))
	}
	g := &OOMGuard{c: c, limit: limit, slack: slack, ev: os.NewFile(uintptr(efd), "oom eventfd"), stop: make(chan struct{}), done: make(chan struct{})}
	go g.loop()
	return g, nil
}

// Rescues counts the times the guard found the cgroup's tasks parked on a
// failed charge and reclaimed for them. Zero for a nil guard.
func (g *OOMGuard) Rescues() uint64 {
	if g == nil {
		return 0
	}
	return g.rescues.Load()
}

// CPU is the time the guard's thread spent on the CPU checking and
// reclaiming for the run's tasks (the kernel's reclaim for a limit write
// runs in the writer). Zero for a nil guard.
func (g *OOMGuard) CPU() time.Duration {
	if g == nil {
		return 0
	}
	return time.Duration(g.cpu.Load())
}

// threadCPU is the calling thread's user and system time.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Close stops the guard. The cgroup is left with its OOM killer off: it is
// about to be removed. Close on a nil guard does nothing.
func (g *OOMGuard) Close() {
	if g == nil {
		return
	}
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	_ = g.ev.SetReadDeadline(time.Now()) // ends a wait at once
	<-g.done
	g.ev.Close()
}

// pollEvery bounds how long a parked task can wait should an OOM event be
// missed. None that comes while a rescue runs is: the eventfd counts it
// and inotify queues it, so the next wait returns at once. The poll is a
// backstop, and each of its wakes costs the whole daemon one (its thread
// is locked: a hand-off to it, and the runtime's monitor roused), so it
// is slow.
const pollEvery = time.Second

// guardV2 sets memory.high a slack under the limit and watches
// memory.events, which the kernel touches at each high and max event.
func (c *Cgroup) guardV2(limit, slack int64) (*OOMGuard, error) {
	if err := kernfile.WriteFile(filepath.Join(c.Path, "memory.high"), []byte(strconv.FormatInt(limit-slack, 10))); err != nil {
		return nil, fmt.Errorf("OOM guard: setting memory.high in %s: %w", c.Path, hint(err))
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("OOM guard: inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, filepath.Join(c.Path, "memory.events"), unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("OOM guard: watching %s/memory.events: %w", c.Path, err)
	}
	_, statErr := os.Stat(filepath.Join(c.Path, "memory.reclaim"))
	g := &OOMGuard{c: c, limit: limit, slack: slack, ev: os.NewFile(uintptr(fd), "memory.events inotify"), reclaim: statErr == nil, stop: make(chan struct{}), done: make(chan struct{})}
	go g.loopV2()
	return g, nil
}

// Reclaims reports whether the guard reclaims for the cgroup (v1; v2 with
// memory.reclaim), or only throttles it (v2 before Linux 5.19).
func (g *OOMGuard) Reclaims() bool { return g != nil && (!g.c.V2 || g.reclaim) }

func (g *OOMGuard) loopV2() {
	defer close(g.done)
	defer g.files.Close()
	runtime.LockOSThread() // its CPU is its thread's
	defer runtime.UnlockOSThread()
	buf := make([]byte, 4096)
	for {
		select {
		case <-g.stop:
			return
		default:
		}
		g.wait(buf)
		t0 := threadCPU()
		g.reclaimV2()
		g.cpu.Add(int64(threadCPU() - t0))
	}
}

// reclaimV2 reclaims while usage is near memory.max.
func (g *OOMGuard) reclaimV2() {
	for g.reclaim && g.nearMax() {
		select {
		case <-g.stop:
			return
		default:
		}
		if !g.rescueV2() {
			time.Sleep(10 * time.Millisecond) // reclaim got nothing: let writeback land
		}
	}
}

// wait waits for an event, at most pollEvery, and reads it (an inotify
// read takes every queued event that fits buf).
func (g *OOMGuard) wait(buf []byte) {
	if err := g.ev.SetReadDeadline(time.Now().Add(pollEvery)); err != nil {
		// Not in the netpoller (never so for an eventfd or inotify):
		// poll(2) it.
		fds := []unix.PollFd{{Fd: int32(g.ev.Fd()), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, int(pollEvery/time.Millisecond)); n == 0 {
			return
		}
	}
	_, _ = g.ev.Read(buf)
}

// nearMax reads whether usage is within half a slack of memory.max: past
// memory.high, where the tasks' own reclaim should have held it; false when
// the cgroup is gone.
func (g *OOMGuard) nearMax() bool {
	b, err := g.files.ReadFile(filepath.Join(g.c.Path, "memory.current"))
	if err != nil {
		return false
	}
	cur, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return err == nil && cur > g.limit-g.slack/2
}

// rescueV2 reclaims the slack through memory.reclaim, a rescue when it
// did; false when the kernel could not (EAGAIN) or the cgroup is gone.
func (g *OOMGuard) rescueV2() bool {
	if kernfile.WriteFile(filepath.Join(g.c.Path, "memory.reclaim"), []byte(strconv.FormatInt(g.slack, 10))) != nil {
		return false
	}
	g.rescues.Add(1)
	return true
}

func (g *OOMGuard) loop() {
	defer close(g.done)
	defer g.files.Close()
	runtime.LockOSThread() // its CPU is its thread's
	defer runtime.UnlockOSThread()
	buf := make([]byte, 8)
	for {
		select {
		case <-g.stop:
			return
		default:
		}
		g.wait(buf) // a read resets the event count
		t0 := threadCPU()
		g.rescueParked()
		g.cpu.Add(int64(threadCPU() - t0))
	}
}

// rescueParked reclaims while tasks are parked on a failed charge.
func (g *OOMGuard) rescueParked() {
	for g.underOOM() {
		select {
		case <-g.stop:
			return
		default:
		}
		if !g.rescue() {
			time.Sleep(10 * time.Millisecond) // reclaim got nothing: let writeback land
		}
	}
}

// underOOM reads whether tasks are parked on a failed charge; false when
// the cgroup is gone.
func (g *OOMGuard) underOOM() bool {
	b, err := g.files.ReadFile(filepath.Join(g.c.Path, "memory.oom_control"))
	if err != nil {
		return false
	}
	n, ok, err := keyedValue(string(b), "under_oom")
	return err == nil && ok && n > 0
}

// rescue reclaims the slack by lowering the limit, then restores it; false
// when the reclaim could not get usage under the lowered limit.
func (g *OOMGuard) rescue() bool {
	g.rescues.Add(1)
	file := filepath.Join(g.c.Path, "memory.limit_in_bytes")
	reclaimed := kernfile.WriteFile(file, []byte(strconv.FormatInt(g.limit-g.slack, 10))) == nil
	// Raising never needs reclaim; it fails only when the cgroup is gone.
	for range 3 {
		err := kernfile.WriteFile(file, []byte(strconv.FormatInt(g.limit, 10)))
		if err == nil || errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	return reclaimed
}
