// Package pressure wakes the observer when memory pressure begins, through
// the kernel's PSI triggers: a file of /proc/pressure or a cgroup2
// group's memory.pressure, opened with "some <stall> <window>" written to
// it, becomes ready for poll() (POLLPRI) once the tasks' stall within a
// window passes the threshold, at most once a window. Nothing runs while
// the host is at rest: a goroutine sleeps in poll() until the kernel
// wakes it. Documentation/accounting/psi.rst, "Monitoring for pressure
// thresholds".
package pressure

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's bounds on a trigger's window (kernel/sched/psi.c): 500 ms
// to 10 s. Without CAP_SYS_RESOURCE it must also be a multiple of 2 s.
const (
	MinWindow = 500 * time.Millisecond
	MaxWindow = 10 * time.Second
)

// Trigger is one PSI trigger. C receives a value when the stall passed the
// threshold within a window; a wake that finds one waiting is merged.
type Trigger struct {
	C <-chan struct{}

	path string
	fd   int
	stop [2]int // a pipe: its write end closed ends the poll
	done chan struct{}
	err  error // why the poll ended, once done is closed
	once sync.Once
}

// Open arms a trigger on path (e.g. /proc/pressure/memory) that fires when
// some task stalled for stall or more within window.
func Open(path string, stall, window time.Duration) (*Trigger, error) {
	if window < MinWindow || window > MaxWindow {
		return nil, fmt.Errorf("PSI trigger on %s: window %v outside the kernel's %v to %v", path, window, MinWindow, MaxWindow)
	}
	if stall <= 0 || stall > window {
		return nil, fmt.Errorf("PSI trigger on %s: stall %v must be positive and at most the window %v", path, stall, window)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("PSI trigger on %s: %w%s", path, err, hint(err))
	}
	spec := "some " + strconv.FormatInt(stall.Microseconds(), 10) + " " + strconv.FormatInt(window.Microseconds(), 10)
	if _, err := unix.Write(fd, append([]byte(spec), 0)); err != nil {
		unix.Close(fd)
		h := hint(err)
		if errors.Is(err, unix.EINVAL) && window%(2*time.Second) != 0 {
			h = " (without CAP_SYS_RESOURCE the kernel takes only windows of whole 2 s, checked every 2 s)"
		}
		return nil, fmt.Errorf("PSI trigger on %s: writing %q: %w%s", path, spec, err, h)
	}
	t := &Trigger{path: path, fd: fd, done: make(chan struct{})}
	if err := unix.Pipe2(t.stop[:], unix.O_CLOEXEC); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("PSI trigger on %s: %w", path, err)
	}
	c := make(chan struct{}, 1)
	t.C = c
	go t.poll(c)
	return t, nil
}

func hint(err error) string {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EOPNOTSUPP):
		return " (the kernel has no PSI here: CONFIG_PSI, or psi=1 on its command line)"
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return " (a trigger with a window under 2 s needs CAP_SYS_RESOURCE)"
	}
	return ""
}

// poll waits for the kernel's wakes until Close, or until the file goes
// (POLLERR: its cgroup was removed).
func (t *Trigger) poll(c chan<- struct{}) {
	defer close(t.done)
	fds := []unix.PollFd{{Fd: int32(t.fd), Events: unix.POLLPRI}, {Fd: int32(t.stop[0]), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			t.err = fmt.Errorf("PSI trigger on %s: poll: %w", t.path, err)
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		switch r := fds[0].Revents; {
		case r&(unix.POLLERR|unix.POLLNVAL) != 0:
			t.err = fmt.Errorf("PSI trigger on %s: the file went (its cgroup removed?)", t.path)
			return
		case r&unix.POLLPRI != 0:
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// Err is why the trigger stopped firing before Close, or nil.
func (t *Trigger) Err() error {
	select {
	case <-t.done:
		return t.err
	default:
		return nil
	}
}

// Close stops the poll and removes the trigger (the kernel drops it with
// the file). It waits for the poll to return.
func (t *Trigger) Close() error {
	t.once.Do(func() {
		unix.Close(t.stop[1])
		<-t.done
		unix.Close(t.stop[0])
		unix.Close(t.fd)
	})
	return nil
}
