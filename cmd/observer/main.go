// Command observer is the thrashscope daemon: it watches memory thrashing on
// this host and serves it as Prometheus metrics. `observer report`, `observer
// compare` and `observer findings` hand over to bin/thrashtool beside it,
// which draws with gonum/plot: the daemon's binary stays without it, its
// fonts and their memory. main only wires flags, logging and shutdown; the
// daemon lives in internal/observer.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/observer"
	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/settings"
)

const defaultDataDir = "/var/lib/thrashscope"

// defaultGOGC is --runtime.gogc's default: a lower peak RSS through a run
// than Go's 100 for no CPU the bench tells apart, where 25 cost CPU
// (docs/metrics.md, bench/README.md's runcost).
const defaultGOGC = 50

type command struct{ name, help string }

// offline are the commands bin/thrashtool carries.
var offline = []command{
	{"report", "Draw the report of ended runs."},
	{"compare", "Run one spec under several thrash-control policies and compare them."},
	{"findings", "Check the findings of Maziero et al. (2013) against a reproduction."},
}

// handOver runs thrashtool with args in place of this process, named
// observer so its messages name the command as typed.
func handOver(args []string) int {
	tool, ok := observer.FindBinary("thrashtool")
	if !ok {
		fmt.Fprintf(os.Stderr, "observer %s: needs thrashtool, beside observer or on PATH (make build makes bin/thrashtool; install it beside observer)\n", args[0])
		return 2
	}
	err := syscall.Exec(tool, append([]string{"observer"}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "observer %s: running %s: %v\n", args[0], tool, err)
	return 2
}

func main() {
	app := kingpin.New("observer", "thrashscope: a live memory-thrashing observatory for this host.")
	sf := serveFlags(app)
	df := diagnoseFlags(app)

	for _, c := range offline {
		app.Command(c.name, c.help+" Runs thrashtool "+c.name+" (see thrashtool "+c.name+" --help).")
	}

	app.Version(version.Print("observer"))
	app.HelpFlag.Short('h')
	if len(os.Args) > 1 && slices.ContainsFunc(offline, func(c command) bool { return c.name == os.Args[1] }) {
		os.Exit(handOver(os.Args[1:]))
	}
	if kingpin.MustParse(app.Parse(os.Args[1:])) == "diagnose" {
		os.Exit(runDiagnose(df))
	}
	os.Exit(runServe(sf))
}

// diagnoseOptions are `observer diagnose`'s flags.
type diagnoseOptions struct {
	url        *string
	watch      *time.Duration
	lastClosed *int
}

func diagnoseFlags(app *kingpin.Application) *diagnoseOptions {
	c := app.Command("diagnose", "Print why this host's thrashes happen and what would end them: the running observer's open diagnoses "+
		"(waiting up to --watch for one) and the last that ended. Exits 0 when nothing thrashes, 1 when something does, 2 on an error.")
	return &diagnoseOptions{
		url:        c.Flag("url", "The observer to ask.").Default("http://127.0.0.1:9752").String(),
		watch:      c.Flag("watch", "How long to wait for a diagnosis to open when none is.").Default("3s").Duration(),
		lastClosed: c.Flag("closed", "How many of the diagnoses that ended to print too.").Default("3").Int(),
	}
}

func runDiagnose(o *diagnoseOptions) int {
	if *o.watch < 0 || *o.watch > time.Hour || *o.lastClosed < 0 {
		fmt.Fprintf(os.Stderr, "observer diagnose: --watch=%s --closed=%d: want a watch of 0 to 1h and 0 or more closed\n", *o.watch, *o.lastClosed)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	open, err := observer.Diagnose(ctx, *o.url, *o.watch, *o.lastClosed, os.Stdout)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "observer diagnose:", err)
		return 2
	case open > 0:
		return 1
	}
	return 0
}

// serveOptions are the daemon's flags.
type serveOptions struct {
	cfg        observer.Config
	psiFull    *float64
	check      *bool
	logLevel   *string
	gomaxprocs *int
	gogc       *int
	gogcSet    bool
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
	serve.Flag("path.cgroupfs", "The host's /sys/fs/cgroup, pure cgroup2 or hybrid (cgroup2 in unified/, v1 memory in memory/), to name workloads in (default: this process's mounts, from /proc/self/mountinfo); in a container, the host's /sys/fs/cgroup mounted read-only.").Default("").StringVar(&cfg.CgroupfsPath)
	serve.Flag("probes", "auto: BPF when it loads, else procfs alone; bpf: BPF or fail; procfs: no BPF.").Default(observer.ProbesAuto).EnumVar(&cfg.Probes, observer.ProbesAuto, observer.ProbesBPF, observer.ProbesProcfs)
	serve.Flag("probes.way", "How the BPF programs reach the kernel's data. auto: fast where the kernel has task BTF, task storage and bpf_find_vma (Linux 5.17+), else portable; fast; portable: probe reads, a per-thread hash and a walk of the mappings' index (Linux 5.8+). --check says which and why.").Default(string(probe.WayAuto)).EnumVar((*string)(&cfg.ProbesWay), "auto", "fast", "portable")
	serve.Flag("sample.interval", "How often to read the kernel.").Default("1s").DurationVar(&cfg.SampleInterval)
	serve.Flag("sample.wake", "Sample before the interval is up when memory trouble begins (major faults or stalls beginning after a quiet second, at most every 250 ms through it; on procfs alone a PSI trigger), so a thrash is judged within a second of its onset. --no-sample.wake keeps to the interval.").Default("true").BoolVar(&cfg.Wake)
	serve.Flag("process.top-k", "How many of the busiest processes get per-process series.").Default("20").IntVar(&cfg.TopK)
	serve.Flag("cgroup.top-k", "How many of the busiest cgroups (workloads: units, containers, pods) get per-cgroup series, by recent major faults and memory stall; 0 turns the per-cgroup accounting off.").Default("20").IntVar(&cfg.CgroupTopK)
	serve.Flag("cgroup.depth", "Count a cgroup deeper than this many levels in its ancestor at that level (3: a pod's containers in the pod, kubepods/<qos>/<pod>); 0 keeps every level.").Default("0").IntVar(&cfg.CgroupDepth)
	serve.Flag("data.dir", "Directory for run records and samples.").Default(defaultDataDir).StringVar(&cfg.DataDir)
	serve.Flag("cgroup.kubelet-root", "The kubelet's --cgroup-root, a path from the cgroup2 root (kind and k3s nest it, e.g. /kubelet.slice). Kubernetes labels (pod_uid, container_id, qos) are read only right under it: under any other group, which a user may make, kubepods is just a name. Repeatable; default /.").StringsVar(&cfg.KubeletRoots)
	serve.Flag("cgroup.parent", "cgroup to create run cgroups under (default: the observer's own).").Default("").StringVar(&cfg.CgroupParent)
	serve.Flag("settings.allow-host", "Let a run's spec change host-wide memory settings (swap backend, zswap, MGLRU, vm.page-cluster, vm.swappiness on cgroup v2): each is journalled in --settings.state-dir before it changes and restored at the run's end, on abort, on SIGTERM and by the next thrashscope process after a kill. Needs --web.api-token-file. Without it such a run is refused; the run cgroup's own settings are always allowed.").Default("false").BoolVar(&cfg.AllowHostSettings)
	serve.Flag("settings.allow-host-without-token", "--settings.allow-host without an API token, for a lab host of your own: any local user, and any container on the host's network, can then change the host's memory settings through the API.").Default("false").BoolVar(&cfg.AllowHostWithoutToken)
	serve.Flag("settings.state-dir", "Where the lock on the host's settings and the journal of their changes are kept: one root-only directory that every thrashscope process on the host shares (a container mounts the host's).").Default(settings.DefaultStateDir).StringVar(&cfg.SettingsStateDir)
	serve.Flag("wss.interval", "τ of the working-set estimate (accessed bits cleared, then read τ later) for the tracked processes; 0 turns it off.").Default("1s").DurationVar(&cfg.WSSInterval)
	serve.Flag("wss.period", "how often each tracked process's working set is measured: a window of --wss.interval opens every period, and the page tables are left alone in between (the scan costs interval/period of running back to back); 0 is every interval.").Default("10s").DurationVar(&cfg.WSSPeriod)
	serve.Flag("detector.pf-high", "Major faults/s that put a process in the high-fault set (TPF's PF_High).").Default("10").Float64Var(&cfg.Detector.PFHigh)
	serve.Flag("detector.pf-low", "Major faults/s below which it leaves the set (TPF's PF_Low).").Default("1").Float64Var(&cfg.Detector.PFLow)
	serve.Flag("detector.fault-kind", "Which major faults count: anon (swap-ins: kinds anon and shmem, as TPF) or all.").Default(indicators.CountAnon).EnumVar(&cfg.FaultKind, indicators.CountAnon, indicators.CountAll)
	serve.Flag("detector.cpu-low", "CPU utilisation (%) below which two or more high-fault processes mean thrashing (TPF's CPU_Low).").Default("40").Float64Var(&cfg.Detector.CPULow)
	serve.Flag("detector.cpu-high", "CPU utilisation (%) past which thrashing is over (TPF's CPU_High).").Default("80").Float64Var(&cfg.Detector.CPUHigh)
	serve.Flag("detector.eviction", "Thrashing needs the host to evict pages in the same interval (pgsteal, or swap-outs): pages read back with none going out are a readback, not a thrash. --no-detector.eviction is TPF's rule as published.").Default("true").BoolVar(&cfg.Detector.Eviction)
	o.psiFull = serve.Flag("detector.psi-full", "PSI memory full share (%) of an interval that means thrashing; it clears below half of it.").Default("10").Float64()
	serve.Flag("web.enable-pprof", "Serve the Go runtime's profiles at /debug/pprof/, to see what the observer itself costs.").Default("false").BoolVar(&cfg.EnablePprof)
	o.check = serve.Flag("check", "Load and attach every probe, print their status, and exit non-zero if a required one failed.").Bool()
	o.logLevel = serve.Flag("log.level", "debug, info, warn or error.").Default("info").Enum("debug", "info", "warn", "error")
	o.gomaxprocs = serve.Flag("runtime.gomaxprocs", "How many CPUs the Go runtime runs the daemon's code on at once (GOMAXPROCS); 0 is every CPU. One keeps its idle threads from spinning for work on the others; its work is a sample a second and a scrape.").Default("1").Int()
	o.gogc = serve.Flag("runtime.gogc", "How far the Go runtime lets the daemon's heap grow past what is live before it collects (GOGC, %). The heap is a few MB, mostly kept buffers; at 50 the daemon's peak RSS through a run is 1.3-1.7 MiB below Go's default 100, for no CPU that the bench tells apart. Unset, GOGC in the environment is kept where it is set.").Default(strconv.Itoa(defaultGOGC)).IsSetByUser(&o.gogcSet).Int()
	serve.Flag("runtime.release-code", "Unmap the pages of this binary that ran once (start, probe loading, a run's set-up and teardown): before the probes load, at the first sample and after each run. They stay in the page cache; what runs again maps back by a minor fault. A mapping holding a debugger's breakpoints or uprobes is left alone.").Default("true").BoolVar(&cfg.ReleaseCode)
	cfg.Detector.MinHigh = indicators.DefaultDetectorConfig().MinHigh
	return o
}

// runServe runs the daemon, or --check.
func runServe(opts *serveOptions) int {
	if *opts.gomaxprocs < 0 {
		fmt.Fprintf(os.Stderr, "observer: --runtime.gomaxprocs=%d: want 0 (every CPU) or more\n", *opts.gomaxprocs)
		return 2
	}
	if *opts.gomaxprocs > 0 {
		runtime.GOMAXPROCS(*opts.gomaxprocs)
	}
	if *opts.gogc < 1 {
		fmt.Fprintf(os.Stderr, "observer: --runtime.gogc=%d: want 1 or more (percent of the live heap)\n", *opts.gogc)
		return 2
	}
	if opts.gogcSet || os.Getenv("GOGC") == "" {
		debug.SetGCPercent(*opts.gogc)
	}
	cfg := opts.cfg
	cfg.Detector.PSIFullHigh, cfg.Detector.PSIFullLow = *opts.psiFull, *opts.psiFull/2
	cfg.AllowHostSettings = cfg.AllowHostSettings || cfg.AllowHostWithoutToken
	var level slog.Level
	_ = level.UnmarshalText([]byte(*opts.logLevel))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if cfg.AllowHostWithoutToken && cfg.APITokenFile == "" {
		logger.Warn("--settings.allow-host-without-token: ANY LOCAL USER, and any container on this host's network, can change this host's memory settings (swap, zswap, MGLRU, page-cluster) and stop runs through the API; give --web.api-token-file on any host but a lab host of your own")
	}

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
