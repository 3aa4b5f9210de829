// Command loadgen is thrashscope's load generator. `loadgen run` runs an
// experiment standalone, `loadgen fill` the progressive-fill experiment, and
// `loadgen consume` is one consumer process, started by a run (loadgen run
// or the observer). main only wires flags, signals and exit codes; the
// logic lives in internal/run, internal/runner, internal/consumer (the
// consumer process itself: consumer.ProcessMain) and internal/standalone.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/prometheus/common/version"
	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/settings"
	"github.com/thrashscope/thrashscope/internal/standalone"
	"github.com/thrashscope/thrashscope/internal/swapdev"
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
	runCmd.Flag("preset", run.PresetHelp()+".").Default("e4").StringVar(&rf.preset)
	rf.consumers = rf.flag(runCmd, "consumers", "Number of consumers N (default: the preset's).").Int()
	rf.size = rf.flag(runCmd, "size", "Bytes per consumer S, before --scale (e.g. 100MB).").Bytes()
	rf.writes = rf.flag(runCmd, "writes", "Writes per cycle W.").Int()
	rf.sleep = rf.flag(runCmd, "sleep", "Sleep after each cycle t_s.").Duration()
	rf.interval = rf.flag(runCmd, "interval", "Activation interval t_c.").Duration()
	rf.leadIn = rf.flag(runCmd, "lead-in", "Time before the first consumer starts.").Duration()
	rf.backing = rf.flag(runCmd, "backing", "anon (needs swap) or file (thrashes the page cache; no swap needed).").Enum(run.BackingAnon, run.BackingFile)
	rf.fill = rf.flag(runCmd, "fill", "random (incompressible, the default) or zero.").Enum(run.FillRandom, run.FillZero)
	rf.policy = rf.flag(runCmd, "policy", "The thrash-control policy: "+policy.Help()+".").Default(policy.None).Enum(policy.Names()...)
	rf.cycles = rf.flag(runCmd, "cycles", "Work, not time: each consumer exits after this many write cycles instead of at its t_f; the record then has each consumer's run time and the run's makespan.").Int64()
	runCmd.Flag("settings", `The kernel's memory settings to run under, a JSON object as a spec's "settings" (docs/settings.md), e.g. {"swap":"zram"}.`).PlaceHolder("JSON").SetValue((*settingsFlag)(&rf.settings))
	runCmd.Flag("settings.allow-host", "Let --settings change host-wide settings (swap, zswap, MGLRU, page cluster; swappiness on cgroup v2), journalled in /run/thrashscope and restored after the run.").BoolVar(&rf.allowHost)
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
	swapDevice               swapdev.Spec
	settings                 settings.Asked
	allowHost                bool
	set                      map[string]*bool
}

// settingsFlag reads --settings.
type settingsFlag settings.Asked

func (v *settingsFlag) Set(text string) error {
	var a settings.Asked
	if err := a.UnmarshalJSON([]byte(text)); err != nil {
		return fmt.Errorf("--settings: %w", err)
	}
	*v = settingsFlag(a)
	return nil
}

func (v *settingsFlag) String() string { return settings.Asked(*v).Label() }

func (f *runFlags) common(cmd *kingpin.CmdClause) {
	f.set = map[string]*bool{}
	f.scale = f.flag(cmd, "scale", "Multiply sizes, the writes per cycle and the memory limit (0.1 makes e4 a 60 s thrash of 25 × 10 MB, W=1,000, in 100 MiB); a --writes you give is kept as given.").Float64()
	f.limit = f.flag(cmd, "memory-limit", "The run cgroup's memory limit before --scale (default 1GiB, the paper's RAM).").Bytes()
	cmd.Flag("out", "Directory for the run record and samples (runs/<id>/).").Default("thrashscope-runs").StringVar(&f.out)
	cmd.Flag("cgroup.parent", "cgroup to make the run cgroup under (default: this process's own).").Default("").StringVar(&f.cgroupParent)
	cmd.Flag("path.procfs", "procfs mount point.").Default("/proc").StringVar(&f.procs)
	f.flag(cmd, "swap-device", "The swap device to emulate with the kernel's I/O throttle: none, "+strings.Join(swapdev.Names()[1:], ", ")+" (docs/runs.md), or limits such as read_iops=200,write_iops=200 (also read_bps, write_bps). On cgroup v1 only swap-ins are throttled; the record says what was.").PlaceHolder("PROFILE|LIMITS").SetValue((*swapFlag)(&f.swapDevice))
}

// swapFlag reads --swap-device.
type swapFlag swapdev.Spec

func (v *swapFlag) Set(text string) error {
	s, err := swapdev.Parse(text)
	if err != nil {
		return fmt.Errorf("--swap-device: %w", err)
	}
	*v = swapFlag(s)
	return nil
}

func (v *swapFlag) String() string { return swapdev.Spec(*v).String() }

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
	if f.isSet("swap-device") {
		s.SwapDevice = &f.swapDevice
	}
	s.Settings = f.settings
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
	rec, err := standalone.Run(ctx, standalone.Config{
		Spec: spec, OutDir: f.out, Binary: exe, CgroupParent: f.cgroupParent, ProcfsPath: f.procs,
		Progress: os.Stderr, Interactive: termErr == nil, Logger: logger, Detector: det,
		AllowHostSettings: f.allowHost,
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
	if d := rec.DeviceLine(); d != "" {
		fmt.Printf("\nswap device %s", d)
	}
	fmt.Printf("\nrecord and samples in %s\n", dir)
	if rec.State != run.StateCompleted {
		return exitFailed
	}
	return exitOK
}

func runConsume(cfg consumer.Config) int {
	err := consumer.ProcessMain(cfg)
	var usage *consumer.UsageError
	switch {
	case err == nil, errors.Is(err, consumer.ErrParentGone):
		return exitOK
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "loadgen consume:", err)
		return exitBadArgs
	default:
		fmt.Fprintln(os.Stderr, "loadgen consume:", err)
		return exitFailed
	}
}
