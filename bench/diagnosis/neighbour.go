package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
)

// neighbourEnv, set to a size in bytes, makes this binary the neighbour
// of a shared-limit scenario: it grows to that size, locked in memory
// (the kernel cannot take it back, so it holds exactly that much whatever
// the pressure), and waits to be killed.
const neighbourEnv = "THRASHSCOPE_DIAGNOSIS_NEIGHBOUR"

// neighbourStep and neighbourEvery: it grows 32 MiB a second, as a
// workload does that takes its neighbours' memory over seconds, not at
// once.
const (
	neighbourStep  = 16 * mib
	neighbourEvery = 500 * time.Millisecond
)

// beNeighbour runs the neighbour when this process was started as one.
func beNeighbour() {
	v := os.Getenv(neighbourEnv)
	if v == "" {
		return
	}
	size, err := strconv.ParseInt(v, 10, 64)
	if err == nil {
		_, err = os.Stdin.Read(make([]byte, 1)) // in its group now
	}
	if err == nil {
		err = growLocked(size)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "diagnosis neighbour:", err)
		os.Exit(1)
	}
	for {
		// Until killed. A bare select{} is a deadlock to the runtime in
		// a binary that starts no other goroutine.
		time.Sleep(time.Hour)
	}
}

func growLocked(size int64) error {
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	for off := int64(0); off < size; off += neighbourStep {
		chunk := mem[off:min(off+neighbourStep, size)]
		// Under the shared limit a lock fails (EAGAIN, ENOMEM) while the
		// kernel cannot yet take the consumers' pages out fast enough; it
		// is tried again, as the pressure moves, with nothing allocated
		// meanwhile (the group is full: a page the runtime faults in then
		// may not be had).
		var err error
		for end := time.Now().Add(neighbourLockFor); ; time.Sleep(50 * time.Millisecond) {
			if err = unix.Mlock(chunk); err == nil || time.Now().After(end) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("locking %d MiB of %d: %w, for %s (RLIMIT_MEMLOCK; root has none)", off>>20, size>>20, err, neighbourLockFor)
		}
		time.Sleep(neighbourEvery)
	}
	return nil
}

// neighbourLockFor is how long the neighbour tries to lock a step.
const neighbourLockFor = 20 * time.Second

// neighbour is a started neighbour in its own memory group.
type neighbour struct {
	group *cgroup.Cgroup
	cmd   *exec.Cmd
}

// startNeighbour starts this binary as a neighbour of size bytes in the
// group g (made by the suite).
func startNeighbour(g *cgroup.Cgroup, size int64) (*neighbour, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), neighbourEnv+"="+strconv.FormatInt(size, 10))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// It grows once told, from inside the group: none of its memory is
	// charged elsewhere first.
	start, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	defer start.Close()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	n := &neighbour{group: g, cmd: cmd}
	if err := g.Add(cmd.Process.Pid); err != nil {
		n.stop()
		return nil, err
	}
	if _, err := start.Write([]byte{1}); err != nil {
		n.stop()
		return nil, fmt.Errorf("starting the neighbour: %w", err)
	}
	return n, nil
}

// stop kills the neighbour and waits for it.
func (n *neighbour) stop() {
	if n == nil || n.cmd.ProcessState != nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
}
