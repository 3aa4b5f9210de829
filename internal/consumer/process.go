package consumer

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/run"
)

// UsageError is a consumer started without the files of the protocol:
// by hand, not by a master. Its text names the descriptor and the fix.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// ProcessMain is the consumer process (loadgen consume): it arms its
// parent-death signal and takes its name, checks the protocol's files,
// keeps its own runtime resident, and runs the consumer until it ends,
// SIGTERM stops it or its master is gone (ErrParentGone). A *UsageError
// means it was not started by a master.
func ProcessMain(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return &UsageError{err.Error()}
	}
	if err := prepareProcess(cfg.Index, cfg.ParentPID); err != nil {
		return err
	}
	rep, err := messagePipe(MessageFD)
	if err != nil {
		return err
	}
	var join io.Writer
	if cfg.Join {
		procs, err := joinFile(JoinFD)
		if err != nil {
			return err
		}
		j := residentJoin{procs: procs}
		if cfg.JoinUnified {
			if j.unified, err = joinFile(UnifiedJoinFD); err != nil {
				return err
			}
		}
		join = j
	}
	var log *CycleLog
	if cfg.CycleLog {
		l, err := OpenCycleLog(BoardFD, cfg.Index)
		if err != nil {
			return &UsageError{fmt.Sprintf("--cycle-log needs fd %d to be the run's cycle board: %v; consumers are started by loadgen run or the observer", BoardFD, err)}
		}
		defer l.Close()
		log = l
	}
	// The consumer's own runtime (heap, stacks, the cycle board) stays
	// resident: pages are locked as they fault in, and the region, mapped
	// later, is unlocked (mapRegion): the region is what thrashes. The
	// pages faulted before the join (residentJoin) are charged to the
	// cgroup the consumer waits in, not to the run.
	if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE | unix.MCL_ONFAULT); err != nil {
		fmt.Fprintf(os.Stderr, "loadgen consume: mlockall: %v; the consumer's runtime pages may be swapped out with its region\n", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return ConsumeLogged(ctx, cfg, os.Stdin, rep, join, log)
}

// prepareProcess arms PR_SET_PDEATHSIG on the main thread, checks that the
// parent is still parentPID (it may have died before the signal was armed)
// and names the process consumer-NN.
func prepareProcess(index, parentPID int) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_PDEATHSIG): %w", err)
	}
	if parentPID > 0 && unix.Getppid() != parentPID {
		return ErrParentGone
	}
	name, err := unix.BytePtrFromString(run.ConsumerName(index))
	if err != nil {
		return err
	}
	err = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0)
	runtime.KeepAlive(name)
	if err != nil {
		return fmt.Errorf("prctl(PR_SET_NAME): %w", err)
	}
	return nil
}

// messagePipe is the message pipe at fd. Not just "is fd open": without
// ExtraFiles the runtime's own cgroup files (GOMAXPROCS) land at fd 3.
func messagePipe(fd int) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || (st.Mode&unix.S_IFMT != unix.S_IFIFO && st.Mode&unix.S_IFMT != unix.S_IFSOCK && st.Mode&unix.S_IFMT != unix.S_IFCHR) {
		return nil, &UsageError{fmt.Sprintf("fd %d must be the message pipe (or %d>/dev/null by hand); consumers are started by loadgen run or the observer", fd, fd)}
	}
	return os.NewFile(uintptr(fd), "message pipe"), nil
}

// joinFile is the run cgroup's cgroup.procs open at fd.
func joinFile(fd int) (*os.File, error) {
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || filepath.Base(target) != "cgroup.procs" {
		return nil, &UsageError{fmt.Sprintf("--join needs fd %d to be the run cgroup's cgroup.procs (it is %q); consumers are started by loadgen run or the observer", fd, target)}
	}
	return os.NewFile(uintptr(fd), "run cgroup.procs"), nil
}

// residentJoin joins the run cgroup through its cgroup.procs once the
// signal stack of every thread of the consumer is resident.
//
// A signal frame is written by the kernel on the receiving thread's signal
// stack. On a cgroup v1 run under the OOM guard a charge made by the kernel
// is refused at the limit, not parked, so a frame on a page first touched
// inside the run kills the consumer with SIGSEGV. Each thread takes one
// signal before the join: its frame pages are charged to the cgroup the
// consumer waits in, and locked (mlockall) they stay resident. Threads the
// runtime starts later get no preemption signal (Env).
//
// Where memory is on cgroup v1 it first joins its group in the unified
// hierarchy (its PSI, its freezer), then its memory group: what the kernel
// allocates for a move is charged to the memory group the writer is in,
// and the run's, under the OOM guard at its limit, refuses such a charge
// (ENOMEM) where the group it waits in has room. A group frozen meanwhile
// freezes it as it joins.
type residentJoin struct{ procs, unified *os.File }

func (j residentJoin) Write(p []byte) (int, error) {
	startThreads(runtime.GOMAXPROCS(0) + spareThreads)
	touchSignalStacks()
	if j.unified != nil {
		if _, err := j.unified.Write(p); err != nil {
			return 0, fmt.Errorf("joining its group in the unified hierarchy: %w", err)
		}
	}
	return j.procs.Write(p)
}

// spareThreads is how many threads beyond GOMAXPROCS a consumer starts
// before it joins: for the fill's workers and system calls in flight.
const spareThreads = 4

// startThreads makes the runtime start n threads at once: each goroutine
// holds one while it waits. The runtime keeps them idle afterwards and
// takes them before it starts another, so a consumer that joins after
// this rarely starts a thread inside the run.
func startThreads(n int) {
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			ready.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
}

// touchSignalStacks sends SIGURG, the runtime's preemption signal and
// otherwise ignored, to each thread in turn and waits until its handler
// ran (a thread that cannot take it within a second is passed over). It
// returns how many threads took it.
func touchSignalStacks() int {
	got := make(chan os.Signal, 1)
	signal.Notify(got, syscall.SIGURG)
	defer signal.Stop(got)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	pid, took := os.Getpid(), 0
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil || unix.Tgkill(pid, tid, unix.SIGURG) != nil {
			continue
		}
		select {
		case <-got:
			took++
		case <-time.After(time.Second):
		}
	}
	return took
}
