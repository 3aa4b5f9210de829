// Command runcost measures the observer's own CPU where it matters: through
// a thrash it induces, and on a host with thousands of processes on procfs
// alone. Each figure is printed beside the Debian node_exporter's, scraped
// the same way at the same time, as the baseline an SRE already runs.
//
//  1. run: the observer and node_exporter start side by side, both scraped
//     every --scrape; a run (--preset, --scale) is started through the
//     observer's API, and each process's CPU (utime+stime) is taken from the
//     run's start to its end. This is done --runs times, each pair afresh,
//     and judged on the median ratios: one run's differ from the next by a
//     tenth either way.
//  2. procfs: --processes sleeping processes are started, then the observer
//     on --probes=procfs and node_exporter, both scraped, for --window.
//
// Invoked by `make bench` (root, swap); see bench/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"syscall"
	"time"
)

type config struct {
	Observer, NodeExporter string
	Preset                 string
	Scale                  float64
	Writes                 int
	Scrape                 time.Duration
	Processes              int
	Window                 time.Duration
	// Runs is how many times the run part is measured.
	Runs int
	// MaxRatio and MaxRSSRatio judge the run part: the observer's CPU and
	// peak RSS over node_exporter's.
	MaxRatio, MaxRSSRatio float64
	// Rest measures both at rest first (no run, the probes loaded) over
	// Window; MaxRestRatio judges the observer's CPU there.
	Rest         bool
	MaxRestRatio float64
	// MaxDiagnosisShare judges the diagnoses' share of the observer's CPU
	// through the runs (median).
	MaxDiagnosisShare float64
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "runcost:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "runcost:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("runcost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.StringVar(&c.Observer, "observer", "bin/observer", "the observer binary (bin/loadgen beside it)")
	fs.StringVar(&c.NodeExporter, "node-exporter", "", "the node_exporter binary; empty: prometheus-node-exporter or node_exporter on PATH")
	fs.StringVar(&c.Preset, "preset", "e4", "the run's preset")
	fs.Float64Var(&c.Scale, "scale", 0.1, "the run's scale")
	fs.IntVar(&c.Writes, "writes", 10_000, "the run's W, kept as given whatever the scale (10,000: e4's W, the heavier load at scale 0.1, as the README's figure was measured); 0 takes the preset's, scaled")
	fs.DurationVar(&c.Scrape, "scrape", time.Second, "how often both are scraped")
	fs.IntVar(&c.Runs, "runs", 3, "how many times the run part is measured, each with a fresh observer and node_exporter; judged on the median ratios")
	fs.IntVar(&c.Processes, "processes", 5000, "sleeping processes for the procfs-alone part; 0 skips it")
	fs.DurationVar(&c.Window, "window", 30*time.Second, "how long the procfs-alone part is measured")
	fs.Float64Var(&c.MaxRatio, "max-ratio", 1.0, "exit non-zero when the observer's CPU through the run passes this many times node_exporter's")
	fs.Float64Var(&c.MaxRSSRatio, "max-rss-ratio", 1.0, "exit non-zero when the observer's peak RSS through the run passes this many times node_exporter's")
	fs.BoolVar(&c.Rest, "rest", true, "measure both at rest first, over --window: no run, the observer's probes loaded")
	fs.Float64Var(&c.MaxRestRatio, "max-rest-ratio", 1.0, "exit non-zero when the observer's CPU at rest passes this many times node_exporter's")
	fs.Float64Var(&c.MaxDiagnosisShare, "max-diagnosis-share", 0.10, "exit non-zero when the diagnoses' share of the observer's CPU through the runs (median) passes this")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case c.Scale <= 0 || c.Scale > 1:
		return c, fmt.Errorf("--scale=%g: want (0, 1]", c.Scale)
	case c.Writes < 0:
		return c, fmt.Errorf("--writes=%d: want 0 (the preset's) or more", c.Writes)
	case c.Scrape < 100*time.Millisecond:
		return c, fmt.Errorf("--scrape=%s: want at least 100ms", c.Scrape)
	case c.Processes < 0 || c.Processes > 30000:
		return c, fmt.Errorf("--processes=%d: want 0 to 30000", c.Processes)
	case c.Runs < 1 || c.Runs > 9:
		return c, fmt.Errorf("--runs=%d: want 1 to 9", c.Runs)
	case c.Window < 5*time.Second:
		return c, fmt.Errorf("--window=%s: want at least 5s", c.Window)
	case c.MaxDiagnosisShare <= 0 || c.MaxDiagnosisShare > 1:
		return c, fmt.Errorf("--max-diagnosis-share=%g: want (0, 1]", c.MaxDiagnosisShare)
	case c.MaxRatio <= 0 || c.MaxRSSRatio <= 0 || c.MaxRestRatio <= 0:
		return c, fmt.Errorf("--max-ratio=%g, --max-rss-ratio=%g, --max-rest-ratio=%g: want each above 0", c.MaxRatio, c.MaxRSSRatio, c.MaxRestRatio)
	}
	if c.NodeExporter == "" {
		for _, name := range []string{"prometheus-node-exporter", "node_exporter"} {
			if p, err := exec.LookPath(name); err == nil {
				c.NodeExporter = p
				break
			}
		}
		if c.NodeExporter == "" {
			return c, errors.New("no node_exporter on PATH: apt-get install prometheus-node-exporter, or pass --node-exporter")
		}
	}
	if os.Geteuid() != 0 {
		return c, errors.New("needs root: the observer loads BPF programs and the run makes a cgroup")
	}
	return c, nil
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	rest := -1.0
	if cfg.Rest {
		r, err := measureRest(ctx, cfg)
		if err != nil {
			return fmt.Errorf("rest part: %w", err)
		}
		fmt.Fprintf(out, "at rest, the probes loaded, both scraped every %s, %.0f s\n", cfg.Scrape, r.Seconds)
		writeCost(out, r)
		if r.ExporterCPU > 0 {
			rest = r.ObserverCPU / r.ExporterCPU
		}
	}
	var runs []cost
	for i := range cfg.Runs {
		r, err := measureRun(ctx, cfg)
		if err != nil {
			return fmt.Errorf("run part, run %d of %d: %w", i+1, cfg.Runs, err)
		}
		fmt.Fprintf(out, "through a run (%d of %d): %s at scale %g (W %d; 0: the preset's), both scraped every %s, %.0f s\n", i+1, cfg.Runs, cfg.Preset, cfg.Scale, cfg.Writes, cfg.Scrape, r.Seconds)
		writeCost(out, r)
		runs = append(runs, r)
	}
	cpu, rss := medians(runs)
	var shares []float64
	for _, r := range runs {
		shares = append(shares, r.DiagnosisShare())
	}
	diag := median(shares)
	if cfg.Runs > 1 {
		fmt.Fprintf(out, "median of %d runs: CPU %.2f× node_exporter's, peak RSS %.2f×, the diagnoses %.1f %% of the observer's CPU\n", cfg.Runs, cpu, rss, 100*diag)
	}
	if cfg.Processes > 0 {
		p, err := measureProcfs(ctx, cfg)
		if err != nil {
			return fmt.Errorf("procfs part: %w", err)
		}
		fmt.Fprintf(out, "procfs alone, %d more processes, both scraped every %s, %.0f s\n", cfg.Processes, cfg.Scrape, p.Seconds)
		writeCost(out, p)
	}
	err := judge(cpu, rss, len(runs), cfg.MaxRatio, cfg.MaxRSSRatio)
	if diag > cfg.MaxDiagnosisShare {
		err = errors.Join(err, fmt.Errorf("the diagnoses took %.1f %% of the observer's CPU through the runs, past --max-diagnosis-share=%g", 100*diag, cfg.MaxDiagnosisShare))
	}
	if cfg.Rest && (rest < 0 || rest > cfg.MaxRestRatio) {
		err = errors.Join(err, fmt.Errorf("the observer's CPU at rest is %.2f× node_exporter's, past --max-rest-ratio=%g", rest, cfg.MaxRestRatio))
	}
	return err
}

// medians are the median ratios over runs of the observer's CPU and peak
// RSS to node_exporter's (a run without node_exporter's figure counts as
// 0, never passing a bound).
func medians(runs []cost) (cpu, rss float64) {
	var cs, rs []float64
	for _, r := range runs {
		c, m := 0.0, 0.0
		if r.ExporterCPU > 0 {
			c = r.ObserverCPU / r.ExporterCPU
		}
		if r.Exporter > 0 {
			m = float64(r.ObserverPeakRSS) / float64(r.Exporter)
		}
		cs, rs = append(cs, c), append(rs, m)
	}
	return median(cs), median(rs)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// judge is an error naming each of the run part's median ratios past its
// bound.
func judge(cpu, rss float64, runs int, maxCPU, maxRSS float64) error {
	of := "through the run"
	if runs > 1 {
		of = fmt.Sprintf("through the runs (median of %d)", runs)
	}
	var errs []error
	if cpu > maxCPU {
		errs = append(errs, fmt.Errorf("the observer's CPU %s is %.2f× node_exporter's, past --max-ratio=%g", of, cpu, maxCPU))
	}
	if rss > maxRSS {
		errs = append(errs, fmt.Errorf("the observer's peak RSS %s is %.2f× node_exporter's, past --max-rss-ratio=%g", of, rss, maxRSS))
	}
	return errors.Join(errs...)
}

// cost is what two processes used over one window.
type cost struct {
	Seconds                   float64 // the window
	ObserverCPU, ExporterCPU  float64 // seconds of CPU
	ObserverPeakRSS, Exporter uint64  // VmHWM, bytes
	// GuardCPU is the run's OOM guard's share of ObserverCPU: the
	// kernel's reclaim for the run, charged to the thread that lowers
	// the limit.
	GuardCPU float64
	// DiagnosisCPU is the diagnoses' share of ObserverCPU, as the
	// observer counts it (diagnosis_cpu_seconds_total).
	DiagnosisCPU float64
}

// DiagnosisShare is DiagnosisCPU over ObserverCPU.
func (c cost) DiagnosisShare() float64 {
	if c.ObserverCPU <= 0 {
		return 0
	}
	return c.DiagnosisCPU / c.ObserverCPU
}

// Percent is CPU seconds over the window as a percentage of one core.
func (c cost) Percent(cpu float64) float64 {
	if c.Seconds <= 0 {
		return 0
	}
	return 100 * cpu / c.Seconds
}

func writeCost(w io.Writer, c cost) {
	fmt.Fprintf(w, "  %-14s %6.2f %% of a core  peak RSS %5.1f MiB\n", "observer", c.Percent(c.ObserverCPU), float64(c.ObserverPeakRSS)/(1<<20))
	fmt.Fprintf(w, "  %-14s %6.2f %% of a core  peak RSS %5.1f MiB\n", "node_exporter", c.Percent(c.ExporterCPU), float64(c.Exporter)/(1<<20))
	if c.GuardCPU > 0 {
		fmt.Fprintf(w, "  %-14s %6.2f %% of a core  (of the observer's: the run's reclaim, in the OOM guard's thread)\n", "OOM guard", c.Percent(c.GuardCPU))
	}
	fmt.Fprintf(w, "  %-14s %6.3f %% of a core  (%.1f %% of the observer's)\n", "diagnoses", c.Percent(c.DiagnosisCPU), 100*c.DiagnosisShare())
	if c.ExporterCPU > 0 {
		fmt.Fprintf(w, "  %-14s %6.2f\n", "ratio", c.ObserverCPU/c.ExporterCPU)
		if c.GuardCPU > 0 {
			// What the observer itself spent, the run's reclaim aside:
			// shown, not judged.
			fmt.Fprintf(w, "  %-14s %6.2f  (without the OOM guard's)\n", "", (c.ObserverCPU-c.GuardCPU)/c.ExporterCPU)
		}
	}
}
