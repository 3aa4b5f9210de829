// Command observer is the thrashscope daemon: it watches memory thrashing on
// this host and serves it as Prometheus metrics. `observer report` draws the
// report of ended runs, and `observer findings` checks the paper's findings
// against a reproduction. main only wires flags, logging and shutdown; the
// daemon lives in internal/observer, the report in internal/report.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"

	"github.com/thrashscope/thrashscope/internal/compare"
	"github.com/thrashscope/thrashscope/internal/findings"
	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/observer"
	"github.com/thrashscope/thrashscope/internal/report"
	"github.com/thrashscope/thrashscope/internal/run"
)

const defaultDataDir = "/var/lib/thrashscope"

func main() {
	app := kingpin.New("observer", "thrashscope: a live memory-thrashing observatory for this host.")
	sf := serveFlags(app)

	rep := app.Command("report", "Draw the report of ended runs: the paper's figures raw and smoothed, demand vs RSS per consumer, the stability overlay of several runs, and summary.txt.")
	var rc report.Config
	rep.Flag("run", "Run id to report on. Repeat it for several runs of one preset (the stability overlay).").Required().StringsVar(&rc.RunIDs)
	rep.Flag("out", "Directory to write the report to; made if missing.").Required().StringVar(&rc.OutDir)
	rep.Flag("data.dir", "The observer's --data.dir, or loadgen run's --out, holding runs/<id>/.").Default(defaultDataDir).StringVar(&rc.DataDir)

	fnd := app.Command("findings", "Check the findings of Maziero et al. (2013) against a reproduction (a data directory per preset: e1, e2, e3, e4 and fig12, as docs/reproduction; beside them, <profile>/<preset> for runs on an emulated swap device) and print them as the README's table, a column per device.")
	findingsDir := fnd.Flag("dir", "The reproduction: <dir>/<preset>/runs/<id>/.").Default("docs/reproduction").String()

	cmpCmd := app.Command("compare", "Run one spec under several thrash-control policies, each repeated, interleaved, standalone (no daemon; run no other thrash meanwhile), and write the comparison (compare.txt: makespan, swap-ins, major faults, slowdowns, peak PSI full, lateness, mean ± SD) and its figure under --out.")
	var cc compare.Config
	cmpSpec := cmpCmd.Flag("spec", `The run spec, as POST /api/v1/runs takes it, without a policy; e.g. {"preset":"syn8","consumers":25}.`).String()
	cmpCmd.Flag("policy", "A policy to compare; repeat it (none, tpf, binpack, calmdown).").StringsVar(&cc.Policies)
	cmpRedraw := cmpCmd.Flag("redraw", "Run nothing: compare the ended runs already under --out (an interrupted comparison, or to draw one anew).").Bool()
	cmpCmd.Flag("repeats", "Runs of each policy.").Default("3").IntVar(&cc.Repeats)
	cmpCmd.Flag("out", "Directory for the runs and the comparison; made if missing.").Required().StringVar(&cc.OutDir)
	cmpCmd.Flag("loadgen", "The consumer binary; default: beside observer, else on PATH.").Default("").StringVar(&cc.Binary)

	app.Version(version.Print("observer"))
	app.HelpFlag.Short('h')
	cmd := kingpin.MustParse(app.Parse(os.Args[1:]))
	switch cmd {
	case rep.FullCommand():
		os.Exit(runReport(rc))
	case cmpCmd.FullCommand():
		os.Exit(runCompare(cc, *cmpSpec, *cmpRedraw))
	case fnd.FullCommand():
		os.Exit(runFindings(*findingsDir))
	}
	os.Exit(runServe(sf))
}

// serveOptions are the daemon's flags.
type serveOptions struct {
	cfg      observer.Config
	psiFull  *float64
	check    *bool
	logLevel *string
}

// serveFlags declares the daemon's flags on its command, the default one,
// so the flat `observer --flag ...` form keeps working; `observer serve
// --help` lists them.
func serveFlags(app *kingpin.Application) *serveOptions {
	o := &serveOptions{}
	cfg := &o.cfg
	serve := app.Command("serve", "Run the daemon (the default command).").Default()
	serve.Flag("web.listen-address", "Address to serve metrics and the API on. Repeatable. Beyond loopback it needs --web.api-token-file.").Default("127.0.0.1:9752").StringsVar(&cfg.ListenAddresses)
	serve.Flag("web.config.file", "exporter-toolkit web config file (TLS, basic auth).").Default("").StringVar(&cfg.WebConfigFile)
	serve.Flag("web.api-token-file", "File holding the bearer token that mutating API requests must carry.").Default("").StringVar(&cfg.APITokenFile)
	serve.Flag("path.procfs", "procfs mount point.").Default("/proc").StringVar(&cfg.ProcfsPath)
	serve.Flag("path.sysfs", "sysfs mount point.").Default("/sys").StringVar(&cfg.SysfsPath)
	serve.Flag("path.cgroupfs", "The host's cgroup2 mount, to name workloads in (default: this process's, from /proc/self/mountinfo); in a container, the host's /sys/fs/cgroup mounted read-only.").Default("").StringVar(&cfg.CgroupfsPath)
	serve.Flag("probes", "auto: BPF when it loads, else procfs alone; bpf: BPF or fail; procfs: no BPF.").Default(observer.ProbesAuto).EnumVar(&cfg.Probes, observer.ProbesAuto, observer.ProbesBPF, observer.ProbesProcfs)
	serve.Flag("sample.interval", "How often to read the kernel.").Default("1s").DurationVar(&cfg.SampleInterval)
	serve.Flag("sample.wake", "Sample before the interval is up when memory trouble begins (major faults or stalls beginning after a quiet second, at most every 250 ms through it; on procfs alone a PSI trigger), so a thrash is judged within a second of its onset. --no-sample.wake keeps to the interval.").Default("true").BoolVar(&cfg.Wake)
	serve.Flag("process.top-k", "How many of the busiest processes get per-process series.").Default("20").IntVar(&cfg.TopK)
	serve.Flag("cgroup.top-k", "How many of the busiest cgroups (workloads: units, containers, pods) get per-cgroup series, by recent major faults and memory stall; 0 turns the per-cgroup accounting off.").Default("20").IntVar(&cfg.CgroupTopK)
	serve.Flag("cgroup.depth", "Count a cgroup deeper than this many levels in its ancestor at that level (3: a pod's containers in the pod, kubepods/<qos>/<pod>); 0 keeps every level.").Default("0").IntVar(&cfg.CgroupDepth)
	serve.Flag("data.dir", "Directory for run records and samples.").Default(defaultDataDir).StringVar(&cfg.DataDir)
	serve.Flag("cgroup.parent", "cgroup to create run cgroups under (default: the observer's own).").Default("").StringVar(&cfg.CgroupParent)
	serve.Flag("wss.interval", "τ of the working-set estimate (accessed bits cleared, then read τ later) for the tracked processes; 0 turns it off.").Default("1s").DurationVar(&cfg.WSSInterval)
	serve.Flag("wss.period", "how often each tracked process's working set is measured: a window of --wss.interval opens every period, and the page tables are left alone in between (the scan costs interval/period of running back to back); 0 is every interval.").Default("10s").DurationVar(&cfg.WSSPeriod)
	serve.Flag("detector.pf-high", "Major faults/s that put a process in the high-fault set (TPF's PF_High).").Default("10").Float64Var(&cfg.Detector.PFHigh)
	serve.Flag("detector.pf-low", "Major faults/s below which it leaves the set (TPF's PF_Low).").Default("1").Float64Var(&cfg.Detector.PFLow)
	serve.Flag("detector.fault-kind", "Which major faults count: anon (swap-ins: kinds anon and shmem, as TPF) or all.").Default(indicators.CountAnon).EnumVar(&cfg.FaultKind, indicators.CountAnon, indicators.CountAll)
	serve.Flag("detector.cpu-low", "CPU utilisation (%) below which two or more high-fault processes mean thrashing (TPF's CPU_Low).").Default("40").Float64Var(&cfg.Detector.CPULow)
	serve.Flag("detector.cpu-high", "CPU utilisation (%) past which thrashing is over (TPF's CPU_High).").Default("80").Float64Var(&cfg.Detector.CPUHigh)
	o.psiFull = serve.Flag("detector.psi-full", "PSI memory full share (%) of an interval that means thrashing; it clears below half of it.").Default("10").Float64()
	serve.Flag("web.enable-pprof", "Serve the Go runtime's profiles at /debug/pprof/, to see what the observer itself costs.").Default("false").BoolVar(&cfg.EnablePprof)
	o.check = serve.Flag("check", "Load and attach every probe, print their status, and exit non-zero if a required one failed.").Bool()
	o.logLevel = serve.Flag("log.level", "debug, info, warn or error.").Default("info").Enum("debug", "info", "warn", "error")
	cfg.Detector.MinHigh = indicators.DefaultDetectorConfig().MinHigh
	return o
}

func runReport(rc report.Config) int {
	res, err := report.Build(rc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "observer report:", err)
		return 1
	}
	for _, f := range res.Files {
		fmt.Println(f)
	}
	return 0
}

func runFindings(dir string) int {
	cols, err := findings.LoadColumns(dir)
	if err == nil {
		var rows []findings.Row
		if rows, err = findings.CheckColumns(cols); err == nil {
			fmt.Print(findings.Table(cols, rows))
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "observer findings:", err)
	return 1
}

// runServe runs the daemon, or --check.
func runServe(opts *serveOptions) int {
	cfg := opts.cfg
	cfg.Detector.PSIFullHigh, cfg.Detector.PSIFullLow = *opts.psiFull, *opts.psiFull/2
	var level slog.Level
	_ = level.UnmarshalText([]byte(*opts.logLevel))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	if *opts.check {
		if err := observer.Check(cfg, os.Stdout, logger); err != nil {
			fmt.Fprintln(os.Stderr, "observer --check:", err)
			return 1
		}
		return 0
	}

	o, err := observer.New(cfg, logger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "observer:", err)
		return 2
	}
	listeners, err := observer.Listen(cfg.ListenAddresses)
	if err != nil {
		o.Close()
		fmt.Fprintln(os.Stderr, "observer:", err)
		return 2
	}
	for _, l := range listeners {
		logger.Info("thrashscope observer listening", "address", l.Addr().String(), "version", version.Version)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := o.Run(ctx, listeners, cfg.WebConfigFile); err != nil {
		logger.Error("observer stopped", "err", err)
		return 1
	}
	return 0
}

// runCompare is observer compare.
func runCompare(cc compare.Config, specJSON string, redraw bool) int {
	if redraw {
		results, err := compare.Redraw(cc.OutDir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "observer compare --redraw:", err)
			return 1
		}
		fmt.Print(compare.Table(results))
		return 0
	}
	if specJSON == "" {
		fmt.Fprintln(os.Stderr, "observer compare: --spec is required (or --redraw)")
		return 2
	}
	spec, err := run.DecodeSpec([]byte(specJSON))
	if err != nil {
		fmt.Fprintln(os.Stderr, "observer compare: --spec:", err)
		return 2
	}
	cc.Spec, cc.ProcfsPath, cc.Progress = spec, "/proc", os.Stderr
	if cc.Binary == "" {
		cc.Binary = observer.FindLoadgen()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	results, err := compare.Run(ctx, cc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "observer compare:", err)
		return 1
	}
	fmt.Print(compare.Table(results))
	fmt.Fprintf(os.Stderr, "wrote %s/compare.txt, compare.png and compare.svg\n", cc.OutDir)
	return 0
}
