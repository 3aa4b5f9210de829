package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// workloadCommand is the hidden first argument that turns this binary into
// a workload child, so each measurement runs in a fresh process.
const workloadCommand = "workload"

// childStartLine is what a child prints when warm-up ends and its measured
// window begins; the parent opens the observer's self-cost window on it.
const childStartLine = "start"

// workloadResult is the last line a child prints, as JSON.
type workloadResult struct {
	Workload  string  `json:"workload"`
	Ops       uint64  `json:"ops"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
}

// workloadFunc warms up, calls started, then runs for duration and returns
// the operations done in the measured window and how long it really took.
type workloadFunc func(warmup, duration time.Duration, started func()) (uint64, time.Duration, error)

// workloadNames is the order workloads are run and reported in.
var workloadNames = []string{"faults", "ctxswitch", "filemajor", "swapin"}

var workloadFuncs = map[string]workloadFunc{
	"faults":    runFaults,
	"ctxswitch": runCtxSwitch,
	"filemajor": runFileMajor,
	"swapin":    runSwapin,
}

// majorFaultWorkloads take one major fault an op; they are judged on BPF
// time per fault and on their A/B slowdown.
var majorFaultWorkloads = map[string]bool{"filemajor": true, "swapin": true}

// cgroupLimits are the workloads that run in a memory cgroup of their own,
// with its limit; the benchmark makes it and removes it again.
var cgroupLimits = map[string]int64{"swapin": swapinLimitBytes}

// runWorkloadCommand is the child's main: `workload NAME [--warmup D] [--duration D]`.
func runWorkloadCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(workloadCommand, flag.ContinueOnError)
	warmup := fs.Duration("warmup", time.Second, "run this long before measuring")
	duration := fs.Duration("duration", 5*time.Second, "measured window")
	cgroupDir := fs.String("cgroup", "", "join this cgroup before starting")
	rate := fs.Float64("rate", 0, "page touches a second for filemajor and swapin; 0: as fast as they go")
	region := fs.Int("region", majorFaultRegionBytes, "bytes filemajor and swapin page through")
	untilEOF := fs.Bool("until-stdin-closes", false, "also stop, cleaning up, when stdin closes")
	if len(args) == 0 {
		return fmt.Errorf("usage: %s NAME [flags], NAME one of %v", workloadCommand, workloadNames)
	}
	name := args[0]
	run, ok := workloadFuncs[name]
	if !ok {
		return fmt.Errorf("unknown workload %q: want one of %v", name, workloadNames)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *duration <= 0 {
		return fmt.Errorf("--duration must be positive, got %v", *duration)
	}
	if *rate < 0 || *region < 1<<20 || *region > 1<<30 {
		return fmt.Errorf("--rate must be at least 0 and --region from 1 MiB to 1 GiB, got %g and %d", *rate, *region)
	}
	regionBytes = *region
	touches = newPacer(*rate)
	if *untilEOF {
		stopOnEOF(os.Stdin)
	}
	if *cgroupDir != "" {
		if err := joinCgroup(*cgroupDir); err != nil {
			return err
		}
	}
	ops, elapsed, err := run(*warmup, *duration, func() { fmt.Fprintln(stdout, childStartLine) })
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	res := workloadResult{Workload: name, Ops: ops, Seconds: elapsed.Seconds()}
	if res.Seconds > 0 {
		res.OpsPerSec = float64(ops) / res.Seconds
	}
	return json.NewEncoder(stdout).Encode(res)
}

// faultsRegionBytes is the region the faults workload cycles through: large
// enough that a pass is many faults per deadline check, small enough to
// never pressure memory.
const faultsRegionBytes = 64 << 20

// runFaults stresses the page-fault path (and the observer's
// page_fault_user program): touch one byte per page of an anonymous region,
// each a minor fault that allocates and zeroes a 4 KiB page, then drop the
// pages with MADV_DONTNEED so the next pass faults again. Ops are pages.
func runFaults(warmup, duration time.Duration, started func()) (uint64, time.Duration, error) {
	pageSize := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, faultsRegionBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0, 0, fmt.Errorf("mapping %d bytes: %w", faultsRegionBytes, err)
	}
	defer unix.Munmap(mem)
	// A huge page would turn 512 faults into one. EINVAL means the kernel
	// has no THP, where every fault is a small page anyway.
	if err := unix.Madvise(mem, unix.MADV_NOHUGEPAGE); err != nil && !errors.Is(err, unix.EINVAL) {
		return 0, 0, fmt.Errorf("madvise(MADV_NOHUGEPAGE): %w", err)
	}
	pagesPerPass := uint64(len(mem) / pageSize)

	for end := time.Now().Add(warmup); time.Now().Before(end); {
		if err := faultPass(mem, pageSize); err != nil {
			return 0, 0, err
		}
	}
	started()
	var ops uint64
	start := time.Now()
	end := start.Add(duration)
	for {
		if err := faultPass(mem, pageSize); err != nil {
			return 0, 0, err
		}
		ops += pagesPerPass
		if now := time.Now(); !now.Before(end) {
			return ops, now.Sub(start), nil
		}
	}
}

// faultPass faults in every page of mem once, then gives them all back.
func faultPass(mem []byte, pageSize int) error {
	for i := 0; i < len(mem); i += pageSize {
		mem[i] = 1
	}
	if err := unix.Madvise(mem, unix.MADV_DONTNEED); err != nil {
		return fmt.Errorf("madvise(MADV_DONTNEED): %w", err)
	}
	return nil
}

// ctxSwitchBatch is how many round trips run between deadline checks.
const ctxSwitchBatch = 1024

// runCtxSwitch stresses the scheduler (and the observer's sched_switch
// program): two OS threads pass one byte back and forth over two blocking
// pipes, so every hop blocks one thread and wakes the other. Both threads
// are pinned to one CPU, making each round trip exactly two context
// switches rather than cross-CPU wake-ups whose cost is mostly IPIs and idle
// exits. Raw read/write, not os.File: the netpoller would park goroutines
// instead of blocking threads. Ops are round trips.
func runCtxSwitch(warmup, duration time.Duration, started func()) (uint64, time.Duration, error) {
	cpu, err := lastAllowedCPU()
	if err != nil {
		return 0, 0, err
	}
	var ping, pong [2]int // [0] read end, [1] write end
	if err := unix.Pipe2(ping[:], unix.O_CLOEXEC); err != nil {
		return 0, 0, fmt.Errorf("creating pipe: %w", err)
	}
	defer unix.Close(ping[0])
	if err := unix.Pipe2(pong[:], unix.O_CLOEXEC); err != nil {
		unix.Close(ping[1])
		return 0, 0, fmt.Errorf("creating pipe: %w", err)
	}
	defer unix.Close(pong[0])

	// Each thread owns the write end it sends on and closes it when it
	// stops, so the other side sees EOF instead of blocking forever.
	echoDone := make(chan error, 1)
	go func() {
		// Never unlocked: the pinned thread exits with the goroutine
		// instead of going back to the runtime's pool.
		runtime.LockOSThread()
		defer unix.Close(pong[1])
		echoDone <- echo(cpu, ping[0], pong[1])
	}()

	pingDone := make(chan pingOutcome, 1)
	go func() {
		runtime.LockOSThread()
		defer unix.Close(ping[1])
		pingDone <- pingPong(cpu, ping[1], pong[0], warmup, duration, started)
	}()

	out := <-pingDone
	if err := <-echoDone; err != nil && out.err == nil {
		out.err = err
	}
	return out.ops, out.elapsed, out.err
}

// pingOutcome is the pinging thread's count of round trips and their time.
type pingOutcome struct {
	ops     uint64
	elapsed time.Duration
	err     error
}

// pingPong runs on its own locked thread, pinned to cpu: round trips
// through the pipes for warmup, then counted for duration.
func pingPong(cpu, send, recv int, warmup, duration time.Duration, started func()) pingOutcome {
	if err := pinToCPU(cpu); err != nil {
		return pingOutcome{err: err}
	}
	for end := time.Now().Add(warmup); time.Now().Before(end); {
		if err := roundTrips(send, recv, ctxSwitchBatch); err != nil {
			return pingOutcome{err: err}
		}
	}
	started()
	var ops uint64
	start := time.Now()
	end := start.Add(duration)
	for {
		if err := roundTrips(send, recv, ctxSwitchBatch); err != nil {
			return pingOutcome{err: err}
		}
		ops += ctxSwitchBatch
		if now := time.Now(); !now.Before(end) {
			return pingOutcome{ops: ops, elapsed: now.Sub(start)}
		}
	}
}

// roundTrips sends one byte to the echo thread and waits for it back, n
// times.
func roundTrips(w, r, n int) error {
	var b [1]byte
	for range n {
		if err := writeByte(w, &b); err != nil {
			return err
		}
		err := readByte(r, &b)
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("echo thread stopped: %w", io.ErrUnexpectedEOF)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// echo returns every byte it reads until the other side closes.
func echo(cpu, r, w int) error {
	if err := pinToCPU(cpu); err != nil {
		return err
	}
	var b [1]byte
	for {
		err := readByte(r, &b)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := writeByte(w, &b); err != nil {
			return err
		}
	}
}

// readByte and writeByte retry on EINTR; the common path is one nil check.
func readByte(fd int, b *[1]byte) error {
	for {
		n, err := unix.Read(fd, b[:])
		if err == nil {
			if n == 0 {
				return io.EOF
			}
			return nil
		}
		if !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("reading pipe: %w", err)
		}
	}
}

func writeByte(fd int, b *[1]byte) error {
	for {
		_, err := unix.Write(fd, b[:])
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("writing pipe: %w", err)
		}
	}
}

// lastAllowedCPU picks the highest CPU this process may run on; CPU 0 tends
// to take more of the host's interrupts.
func lastAllowedCPU() (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, fmt.Errorf("reading CPU affinity: %w", err)
	}
	for cpu := len(set)*64 - 1; cpu >= 0; cpu-- {
		if set.IsSet(cpu) {
			return cpu, nil
		}
	}
	return 0, errors.New("CPU affinity mask is empty")
}

// pinToCPU binds the calling OS thread (pid 0 means this thread) to cpu.
func pinToCPU(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning thread to CPU %d: %w", cpu, err)
	}
	return nil
}
