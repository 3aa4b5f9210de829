// Command overhead measures what the thrashscope observer costs the host.
//
// It sits beside the data flow, not in it: it runs bin/observer as a black
// box, alternates rounds of two workloads with and without it (a page-fault
// loop for the page_fault_user program, a pipe ping-pong for sched_switch),
// and prints the slowdown ratios next to the observer's own CPU and memory.
// While the observer runs, the kernel's BPF run-time statistics attribute
// to each op the time its programs took, the figure the targets are judged
// on: the A/B timing alone is too noisy on a small host.
// Invoked by `make bench`; see bench/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == workloadCommand {
		if err := runWorkloadCommand(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "workload:", err)
			os.Exit(1)
		}
		return
	}

	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "bench")
	if err := checkCanObserve(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &bench{cfg: cfg, logger: logger, ticksPerSecond: clockTicksPerSecond()}
	if len(cfg.Curves.Curves) > 0 {
		if err := runCurves(ctx, b); err != nil {
			fmt.Fprintln(os.Stderr, "overhead:", err)
			os.Exit(1)
		}
		return
	}
	rep, err := b.run(ctx)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted: %w", err)
		}
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
	if err := writeTable(os.Stdout, rep); err != nil {
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
	if cfg.JSONPath != "" {
		if err := writeJSON(cfg.JSONPath, rep); err != nil {
			fmt.Fprintln(os.Stderr, "overhead:", err)
			os.Exit(1)
		}
	}
}

// parseFlags turns the command line into a validated config.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("overhead", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run ./bench/overhead [flags]\n\n"+
			"Runs each workload in alternating baseline and observed rounds and prints\n"+
			"the slowdown with the observer running, and the observer's own CPU and RSS.\n"+
			"Observed rounds load BPF, so they need root.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	cfg := config{ReadyTimeout: readyTimeout, StopTimeout: stopTimeout}
	fs.StringVar(&cfg.ObserverBin, "observer", "bin/observer", "observer binary to measure")
	fs.StringVar(&cfg.ProbesWay, "probes.way", "auto", "the observer's --probes.way: auto, fast or portable")
	fs.IntVar(&cfg.Rounds, "rounds", 5, "baseline/observed pairs per workload")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Second, "measured window of each phase, and of the idle measurement")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "workload run before each measured window")
	fs.DurationVar(&cfg.Settle, "settle", time.Second, "wait after the observer is ready before a window opens")
	workloads := fs.String("workloads", strings.Join(workloadNames, ","), "comma-separated workloads to run")
	fs.BoolVar(&cfg.BaselineOnly, "baseline-only", false, "run only the baseline phases: no observer, no root needed")
	fs.StringVar(&cfg.JSONPath, "json", "", "also write the figures as JSON to this file")
	fs.StringVar(&cfg.ProcRoot, "path.procfs", "/proc", "procfs mount point")
	curves := curveFlags(fs, &cfg.Curves)
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if err := curves(); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if !slices.Contains([]string{"auto", "fast", "portable"}, cfg.ProbesWay) {
		return config{}, fmt.Errorf("--probes.way must be auto, fast or portable, got %q", cfg.ProbesWay)
	}
	if cfg.Rounds < 1 {
		return config{}, fmt.Errorf("--rounds must be at least 1, got %d", cfg.Rounds)
	}
	if cfg.Duration <= 0 {
		return config{}, fmt.Errorf("--duration must be positive, got %v", cfg.Duration)
	}
	if cfg.Warmup < 0 || cfg.Settle < 0 {
		return config{}, errors.New("--warmup and --settle cannot be negative")
	}
	for name := range strings.SplitSeq(*workloads, ",") {
		name = strings.TrimSpace(name)
		if _, ok := workloadFuncs[name]; !ok {
			return config{}, fmt.Errorf("--workloads: unknown workload %q, want some of %s", name, strings.Join(workloadNames, ","))
		}
		if !slices.Contains(cfg.Workloads, name) {
			cfg.Workloads = append(cfg.Workloads, name)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return config{}, fmt.Errorf("finding this binary to run workloads: %w", err)
	}
	cfg.Exe = exe
	return cfg, nil
}

// checkCanObserve fails early, with what to do, when observed rounds could
// not run: they would otherwise fail only after the first baseline.
func checkCanObserve(cfg config) error {
	names := cfg.Workloads
	if slices.Contains(cfg.Curves.Curves, "workloads") {
		names = []string{"swapin"}
	} else if len(cfg.Curves.Curves) > 0 {
		names = nil
	}
	for _, name := range names {
		if cgroupLimits[name] == 0 {
			continue
		}
		if os.Geteuid() != 0 {
			return fmt.Errorf("the %s workload runs in a memory cgroup it makes, which needs root: rerun as root, or leave it out of --workloads", name)
		}
		if b, err := os.ReadFile("/proc/swaps"); err != nil || strings.Count(string(b), "\n") < 2 {
			return fmt.Errorf("the %s workload swaps, and this host has no swap: enable a swap file (fallocate, mkswap, swapon) or leave it out of --workloads", name)
		}
	}
	if cfg.BaselineOnly && len(cfg.Curves.Curves) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return errors.New("observed rounds start the observer, which loads BPF programs and needs root: " +
			"rerun as root (sudo make bench), or pass --baseline-only to time the workloads alone")
	}
	if _, err := exec.LookPath(cfg.ObserverBin); err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			err = ee.Err
		}
		return fmt.Errorf("no observer to measure at %q (%v): build it with `make build`, or point --observer at it", cfg.ObserverBin, err)
	}
	// Observed rounds are judged on the kernel's BPF statistics.
	stats, err := enableBPFStats()
	if err != nil {
		return err
	}
	return stats.Close()
}

func (b *bench) reportConfig() reportConfig {
	c := reportConfig{
		Rounds:          b.cfg.Rounds,
		DurationSeconds: b.cfg.Duration.Seconds(),
		WarmupSeconds:   b.cfg.Warmup.Seconds(),
		BaselineOnly:    b.cfg.BaselineOnly,
		CPUs:            runtime.NumCPU(),
		Started:         time.Now().UTC().Format(time.RFC3339),
	}
	if !b.cfg.BaselineOnly {
		c.Observer = b.cfg.ObserverBin
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		c.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	return c
}

func writeJSON(path string, rep *report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding JSON: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing --json: %w", err)
	}
	return nil
}
