// Command loadgen is thrashscope's load generator. `loadgen run` runs an
// experiment standalone, `loadgen fill` the progressive-fill experiment, and
// `loadgen consume` is one consumer process, started by the master (loadgen
// run or the observer). main only wires flags, signals, prctl and exit
// codes; the logic lives in internal/run, internal/master, internal/consumer
// and internal/runs.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/prometheus/common/version"
	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/runs"
)

// Exit statuses.
const (
	exitOK      = 0 // also after SIGTERM, and when the master is gone
	exitFailed  = 1
	exitBadArgs = 2
)

// The main goroutine stays on the main thread, so that PR_SET_NAME names
// the thread-group leader: the comm in /proc/<pid>/comm and stat.
func init() { runtime.LockOSThread() }

func main() {
	app := kingpin.New("loadgen", "thrashscope's load generator: controlled memory thrashing, after Maziero et al. (2013).")
	app.Version(version.Print("loadgen"))
	app.HelpFlag.Short('h')
	consume, consumeCfg := consumer.Command(app)

	runCmd := app.Command("run", "Run an experiment standalone, without the observer: consumers in a memory-limited cgroup, a live progress line, and the run record and samples.csv under --out.")
	var rf runFlags
	rf.common(runCmd)
	runCmd.Flag("preset", "e1, e2, e3, e4, fig12 (Maziero et al., 2013), syn8 (Reuven and Wiseman, 2006) or pair (Jiang and Zhang, 2001).").Default("e4").StringVar(&rf.preset)
	rf.consumers = rf.flag(runCmd, "consumers", "Number of consumers N (default: the preset's).").Int()
	rf.size = rf.flag(runCmd, "size", "Bytes per consumer S, before --scale (e.g. 100MB).").Bytes()
	rf.writes = rf.flag(runCmd, "writes", "Writes per cycle W.").Int()
	rf.sleep = rf.flag(runCmd, "sleep", "Sleep after each cycle t_s.").Duration()
	rf.interval = rf.flag(runCmd, "interval", "Activation interval t_c.").Duration()
	rf.leadIn = rf.flag(runCmd, "lead-in", "Time before the first consumer starts.").Duration()
	rf.backing = rf.flag(runCmd, "backing", "anon (needs swap) or file (thrashes the page cache; no swap needed).").Enum(run.BackingAnon, run.BackingFile)
	rf.fill = rf.flag(runCmd, "fill", "random (incompressible, the default) or zero.").Enum(run.FillRandom, run.FillZero)
	rf.policy = rf.flag(runCmd, "policy", "The thrash-control policy: none (Linux as it is), tpf (protect the high-fault consumer closest to its demand), binpack (round-robin bins that fit, the rest frozen and paged out) or calmdown (stop the newest consumer for 20 s while memory is low and paging high).").Default(policy.None).Enum(policy.Names...)
	rf.cycles = rf.flag(runCmd, "cycles", "Work, not time: each consumer exits after this many write cycles instead of at its t_f; the record then has each consumer's run time and the run's makespan.").Int64()
	runCmd.Flag("detector.psi-full", "PSI memory full share (%) of an interval that means thrashing, to a policy; it clears below half of it (as the observer's flag).").Default("10").Float64Var(&rf.psiFull)

	fill := app.Command("fill", "The progressive-fill experiment (seed 002): fill chunks up to a total inside a run cgroup, keeping earlier chunks hot, and write fill time per chunk (mean, SD) to fill.csv.")
	var ff runFlags
	ff.common(fill)
	ff.size = ff.flag(fill, "chunk", "Chunk size (default: the memory limit / 8).").Bytes()
	total := fill.Flag("total", "Total to fill (default: 1.5 × the memory limit).").Bytes()
	ff.repeats = ff.flag(fill, "repeats", "Repetitions, for the mean and SD.").Default("5").Int()

	cmd, err := app.Parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: %v; try --help\n", err)
		os.Exit(exitBadArgs)
	}
	switch cmd {
	case consume.FullCommand():
		os.Exit(runConsume(*consumeCfg))
	case runCmd.FullCommand():
		os.Exit(runExperiment(rf.spec(), rf))
	case fill.FullCommand():
		ff.preset = run.PresetFill
		spec, err := ff.fillSpec(int64(*total))
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen fill:", err)
			os.Exit(exitBadArgs)
		}
		os.Exit(runExperiment(spec, ff))
	}
}

// runFlags are loadgen run's and fill's flags; unset ones leave the
// preset's value.
type runFlags struct {
	preset                   string
	scale                    *float64
	limit, size              *units.Base2Bytes
	consumers, writes        *int
	repeats                  *int
	cycles                   *int64
	policy                   *string
	sleep, interval, leadIn  *time.Duration
	backing, fill            *string
	out, cgroupParent, procs string
	psiFull                  float64
	set                      map[string]*bool
}

func (f *runFlags) common(cmd *kingpin.CmdClause) {
	f.set = map[string]*bool{}
	f.scale = f.flag(cmd, "scale", "Multiply sizes, the writes per cycle and the memory limit (0.1 makes e4 a 60 s thrash of 25 × 10 MB, W=1,000, in 100 MiB); a --writes you give is kept as given.").Float64()
	f.limit = f.flag(cmd, "memory-limit", "The run cgroup's memory limit before --scale (default 1GiB, the paper's RAM).").Bytes()
	cmd.Flag("out", "Directory for the run record and samples (runs/<id>/).").Default("thrashscope-runs").StringVar(&f.out)
	cmd.Flag("cgroup.parent", "cgroup to make the run cgroup under (default: this process's own).").Default("").StringVar(&f.cgroupParent)
	cmd.Flag("path.procfs", "procfs mount point.").Default("/proc").StringVar(&f.procs)
}

// flag declares an optional flag whose absence leaves the preset's value.
func (f *runFlags) flag(cmd *kingpin.CmdClause, name, help string) *kingpin.FlagClause {
	f.set[name] = new(bool)
	return cmd.Flag(name, help).IsSetByUser(f.set[name])
}

func (f *runFlags) isSet(name string) bool { b := f.set[name]; return b != nil && *b }

func (f *runFlags) spec() run.Spec {
	s := run.Spec{Preset: f.preset}
	if f.isSet("scale") {
		s.Scale = f.scale
	}
	if f.isSet("memory-limit") {
		s.MemoryLimitBytes = ptr(int64(*f.limit))
	}
	if f.isSet("size") || f.isSet("chunk") {
		s.SizeBytes = ptr(int64(*f.size))
	}
	if f.isSet("consumers") {
		s.Consumers = f.consumers
	}
	if f.isSet("writes") {
		s.WritesPerCycle = f.writes
	}
	dur := func(name string, d *time.Duration) *run.Duration {
		if !f.isSet(name) {
			return nil
		}
		return ptr(run.Duration(*d))
	}
	s.Sleep, s.Interval, s.LeadIn = dur("sleep", f.sleep), dur("interval", f.interval), dur("lead-in", f.leadIn)
	if f.isSet("backing") {
		s.Backing = f.backing
	}
	if f.isSet("fill") {
		s.Fill = f.fill
	}
	if f.repeats != nil {
		s.Repeats = f.repeats
	}
	if f.isSet("cycles") {
		s.Cycles = f.cycles
	}
	if f.isSet("policy") {
		s.Policy = f.policy
	}
	return s
}

// fillSpec turns --chunk and --total into the fill preset's chunk size and
// count, defaulting both from the memory limit (seed 002 filled 1 GB chunks
// past RAM).
func (f *runFlags) fillSpec(total int64) (run.Spec, error) {
	s := f.spec()
	limit := int64(1 << 30)
	if s.MemoryLimitBytes != nil {
		limit = *s.MemoryLimitBytes
	}
	chunk := limit / 8
	if s.SizeBytes != nil {
		chunk = *s.SizeBytes
	}
	if total == 0 {
		total = limit + limit/2
	}
	if chunk <= 0 || total < chunk {
		return s, fmt.Errorf("--total (%d) must be at least one --chunk (%d)", total, chunk)
	}
	s.SizeBytes, s.Consumers = &chunk, ptr(int(total/chunk))
	return s, nil
}

func ptr[T any](v T) *T { return &v }

// runExperiment runs a spec standalone and prints where its record went.
func runExperiment(spec run.Spec, f runFlags) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		return exitFailed
	}
	_, termErr := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	det := indicators.DefaultDetectorConfig()
	if f.psiFull > 0 {
		det.PSIFullHigh, det.PSIFullLow = f.psiFull, f.psiFull/2
	}
	if err := det.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		return exitBadArgs
	}
	rec, err := runs.RunStandalone(ctx, runs.StandaloneConfig{
		Spec: spec, OutDir: f.out, Binary: exe, CgroupParent: f.cgroupParent, ProcfsPath: f.procs,
		Progress: os.Stderr, Interactive: termErr == nil, Logger: logger, Detector: det,
	})
	var fe *run.FieldError
	var ue *run.UnsafeError
	switch {
	case errors.As(err, &fe):
		fmt.Fprintf(os.Stderr, "loadgen: invalid spec: %v\n", err)
		return exitBadArgs
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "loadgen: refused: %v\n", err)
		return exitBadArgs
	case err != nil:
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		return exitFailed
	}
	dir := filepath.Join(f.out, "runs", rec.ID)
	fmt.Printf("run %s %s", rec.ID, rec.State)
	if rec.Reason != "" {
		fmt.Printf(": %s", rec.Reason)
	}
	fmt.Printf("\nrecord and samples in %s\n", dir)
	if rec.State != run.StateCompleted {
		return exitFailed
	}
	return exitOK
}

func runConsume(cfg consumer.Config) int {
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen consume:", err)
		return exitBadArgs
	}
	if err := prepareConsumerProcess(cfg.Index, cfg.ParentPID); err != nil {
		if errors.Is(err, consumer.ErrParentGone) {
			return exitOK
		}
		fmt.Fprintln(os.Stderr, "loadgen consume:", err)
		return exitFailed
	}
	// Not just "is fd 3 open": without ExtraFiles the runtime's own cgroup
	// files (GOMAXPROCS) land there.
	var st unix.Stat_t
	if err := unix.Fstat(3, &st); err != nil || (st.Mode&unix.S_IFMT != unix.S_IFIFO && st.Mode&unix.S_IFMT != unix.S_IFSOCK && st.Mode&unix.S_IFMT != unix.S_IFCHR) {
		fmt.Fprintln(os.Stderr, "loadgen consume: fd 3 must be the message pipe (or 3>/dev/null by hand); consumers are started by loadgen run or the observer")
		return exitBadArgs
	}
	rep := os.NewFile(3, "message pipe")
	var join io.Writer
	if cfg.Join {
		if target, err := os.Readlink("/proc/self/fd/4"); err != nil || filepath.Base(target) != "cgroup.procs" {
			fmt.Fprintf(os.Stderr, "loadgen consume: --join needs fd 4 to be the run cgroup's cgroup.procs (it is %q); consumers are started by loadgen run or the observer\n", target)
			return exitBadArgs
		}
		join = residentJoin{os.NewFile(4, "run cgroup.procs")}
	}
	var log *consumer.CycleLog
	if cfg.CycleLog {
		l, err := consumer.OpenCycleLog(5, cfg.Index)
		if err != nil {
			fmt.Fprintf(os.Stderr, "loadgen consume: --cycle-log needs fd 5 to be the run's cycle board: %v; consumers are started by loadgen run or the observer\n", err)
			return exitBadArgs
		}
		defer l.Close()
		log = l
	}
	// The consumer's own runtime (heap, stacks, the cycle board) stays
	// resident: pages are locked as they fault in, and the region, mapped
	// later, is unlocked (loadgen's mapRegion): the region is what thrashes.
	// The pages faulted before the join (residentJoin) are charged to the
	// cgroup the consumer waits in, not to the run.
	if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE | unix.MCL_ONFAULT); err != nil {
		fmt.Fprintf(os.Stderr, "loadgen consume: mlockall: %v; the consumer's runtime pages may be swapped out with its region\n", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := consumer.ConsumeLogged(ctx, cfg, os.Stdin, rep, join, log)
	switch {
	case err == nil, errors.Is(err, consumer.ErrParentGone):
		return exitOK
	default:
		fmt.Fprintln(os.Stderr, "loadgen consume:", err)
		return exitFailed
	}
}

// prepareConsumerProcess arms PR_SET_PDEATHSIG on the main thread, checks
// that the parent is still parentPID (it may have died before the signal
// was armed) and names the process consumer-NN.
func prepareConsumerProcess(index, parentPID int) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_PDEATHSIG): %w", err)
	}
	if parentPID > 0 && unix.Getppid() != parentPID {
		return consumer.ErrParentGone
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

// residentJoin joins the run cgroup through its cgroup.procs once the
// signal stack of every thread of the consumer is resident.
//
// A signal frame is written by the kernel on the receiving thread's signal
// stack. On a cgroup v1 run under the OOM guard a charge made by the kernel
// is refused at the limit, not parked, so a frame on a page first touched
// inside the run kills the consumer with SIGSEGV. Each thread takes one
// signal before the join: its frame pages are charged to the cgroup the
// consumer waits in, and locked (mlockall) they stay resident. Threads the
// runtime starts later get no preemption signal (consumer.Env).
type residentJoin struct{ procs *os.File }

func (j residentJoin) Write(p []byte) (int, error) {
	startThreads(runtime.GOMAXPROCS(0) + spareThreads)
	touchSignalStacks()
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
// ran (a thread that cannot take it within a second is passed over).
func touchSignalStacks() {
	got := make(chan os.Signal, 1)
	signal.Notify(got, syscall.SIGURG)
	defer signal.Stop(got)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	pid := os.Getpid()
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil || unix.Tgkill(pid, tid, unix.SIGURG) != nil {
			continue
		}
		select {
		case <-got:
		case <-time.After(time.Second):
		}
	}
}
