// Package observer assembles the thrashscope daemon: the probes (or procfs
// alone), the sampler, the metrics, the sample store and live page, and the
// HTTP server. It starts them in data-flow order and stops them in reverse:
// the sample loop, the BPF links and objects, then the HTTP server.
package observer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/pressure"

	rungroup "github.com/oklog/run"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
	"golang.org/x/net/netutil"

	"github.com/thrashscope/thrashscope/internal/api"
	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/diagnosis"
	"github.com/thrashscope/thrashscope/internal/history"
	"github.com/thrashscope/thrashscope/internal/live"
	"github.com/thrashscope/thrashscope/internal/metrics"
	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/runner"
	"github.com/thrashscope/thrashscope/internal/sampler"
	"github.com/thrashscope/thrashscope/internal/store"
)

// Observer is the assembled daemon.
type Observer struct {
	cfg      Config
	logger   *slog.Logger
	probe    *probe.Probe // nil on procfs alone
	pipeline *pipeline.Pipeline
	registry *prometheus.Registry
	handler  http.Handler
	runs     *runner.Slot      // nil when runs are unavailable
	wake     *pressure.Trigger // nil when --detector.wake-stall=0 or the kernel has none
	history  *history.Store    // the live page's last 15 minutes
	release  *codeReleaser     // nil with --no-runtime.release-code
	// diagnoses say why each thrash happens; nil without the workloads
	// (no per-cgroup probes) or with --check.
	diagnoses *diagnosis.Stage
	// pairs: the runs' groups in the unified hierarchy and their memory
	// groups, told by the runs, read by the workloads (memory on v1).
	pairs cgroup.Pairs
}

// New loads the probes as --probes says and builds everything else.
func New(cfg Config, logger *slog.Logger) (*Observer, error) {
	return build(cfg, logger, false)
}

// build assembles the observer; checkOnly leaves out the runs, so
// --check changes nothing on the host.
func build(cfg Config, logger *slog.Logger, checkOnly bool) (*Observer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	fs, err := procfs.NewFS(cfg.ProcfsPath)
	if err != nil {
		return nil, err
	}
	o := &Observer{cfg: cfg, logger: logger}
	if cfg.ReleaseCode && !checkOnly {
		o.release = newCodeReleaser(logger.With("component", "codepages"))
		o.release.releaseNow("before the probes load")
	}

	if err := o.loadProbes(cfg, checkOnly); err != nil {
		return nil, err
	}
	if !checkOnly {
		if o.runs, err = newRuns(cfg, fs, logger, &o.pairs); err != nil {
			o.Close()
			return nil, err
		}
	}
	o.history = history.New(cfg.SampleInterval)
	if !checkOnly && cfg.Wake && o.probe == nil {
		o.wake = openWake(cfg, logger)
	}
	if o.pipeline, err = o.declarePipeline(cfg, fs, logger, checkOnly); err != nil {
		o.Close()
		return nil, err
	}

	if err := o.buildHandler(cfg); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

// loadProbes loads the BPF probes unless --probes=procfs; where they do not
// load, the observer runs on procfs alone unless --probes=bpf.
func (o *Observer) loadProbes(cfg Config, checkOnly bool) error {
	logger := o.logger
	if cfg.Probes == ProbesProcfs {
		return nil
	}
	popts := probe.Options{SysfsPath: cfg.SysfsPath, Cgroups: cfg.CgroupTopK > 0, Way: cfg.ProbesWay, Logger: logger.With("component", "probe")}
	if cfg.Wake && !checkOnly {
		popts.WakeGap = pipeline.MinWakeGap
	}
	p, err := probe.Load(popts)
	switch {
	case err == nil:
		o.probe = p
	case cfg.Probes == ProbesBPF:
		return err
	default:
		logger.Warn("running on procfs alone, without per-process stall times or fault kinds: "+err.Error(), "probes", "procfs")
	}
	return nil
}

// buildHandler gathers the metrics and builds the HTTP handler: the API,
// the live page, /metrics.
func (o *Observer) buildHandler(cfg Config) error {
	logger := o.logger
	o.registry = prometheus.NewRegistry()
	o.registry.MustRegister(
		versioncollector.NewCollector("thrashscope"),
		collectors.NewGoCollector(),
		metrics.NewSelfCollector("/proc"), // its own, not --path.procfs's host
	)
	// The package's own series (the host's, the processes', the cgroups',
	// the run's), most of a scrape, are gathered without the registry's
	// per-series work.
	direct := []prometheus.Collector{metrics.NewCollector(o.pipeline), metrics.NewWorkloadCollector(o.pipeline)}
	if o.runs != nil {
		direct = append(direct, metrics.NewRunCollector(o.runs.Service()))
	}
	if o.diagnoses != nil {
		direct = append(direct, metrics.NewDiagnosisCollector(o.diagnoses))
	}
	opts := api.Options{
		Gatherer:    metrics.NewGatherer(o.registry, direct...).Transactional(),
		Registerer:  o.registry,
		Ready:       o.ready,
		Pprof:       cfg.EnablePprof,
		Logger:      logger.With("component", "api"),
		ListenHosts: listenHosts(cfg.ListenAddresses),
	}
	if o.runs != nil {
		opts.Runs = o.runs.Service()
	}
	if o.diagnoses != nil {
		opts.Diagnoses = o.diagnoses
	}
	if cfg.APITokenFile != "" {
		var err error
		if opts.Token, err = ReadToken(cfg.APITokenFile); err != nil {
			return err
		}
		if msg := TokenFileExposed(cfg.APITokenFile); msg != "" {
			logger.Warn(msg)
		}
	}
	page := live.Options{History: o.history, TokenRequired: opts.Token != "", Interval: cfg.SampleInterval, Logger: logger.With("component", "live")}
	if o.runs != nil {
		page.Run = o.runStatus
	}
	if o.diagnoses != nil {
		page.Diagnoses = o.diagnoses.Open
	}
	opts.Page = live.New(page)
	o.handler = api.NewHandler(opts)
	return nil
}

// ready is nil once a sample is taken and while the latest one read every
// source it uses; else it says which failed (the observer then serves
// the series of the sources it read, and those of the others are left out).
func (o *Observer) ready() error {
	t, ok := o.pipeline.Latest()
	if !ok {
		return errors.New("no sample taken yet")
	}
	var failed []string
	for src, err := range t.Reading.Failed {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", sampler.Source(src), err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("the latest sample could not read %s; check --path.procfs and the log", strings.Join(failed, ", "))
	}
	return nil
}

// runStatus is the most recent run for the live page.
func (o *Observer) runStatus() (live.RunStatus, bool) {
	st := o.runs.Service().Status()
	if !st.Last {
		return live.RunStatus{}, false
	}
	p := st.Progress
	rs := live.RunStatus{
		ID: st.ID, Preset: st.Preset, Active: st.Active,
		ConsumersActive: p.Active, ConsumersPlanned: p.Planned, Consumers: len(p.Cycles),
		Elapsed: p.Elapsed, Duration: p.Total,
		DemandBytes: p.DemandBytes, LimitBytes: p.LimitBytes,
		Policy: runner.PolicyLine(st.Policy),
	}
	if rec, err := o.runs.Service().Get(st.ID); err == nil {
		rs.State = rec.State
		rs.Active = run.Active(rec.State)
		rs.SwapDevice = rec.DeviceLine()
	}
	return rs, true
}

// newRuns sets up the runs, or returns nil (logged) when runs cannot
// work here: the observer still observes. A data directory another
// thrashscope process holds is an error: two on one would undo each
// other's runs.
func newRuns(cfg Config, fs procfs.FS, logger *slog.Logger, pairs *cgroup.Pairs) (*runner.Slot, error) {
	log := logger.With("component", "runs")
	st, err := store.Open(cfg.DataDir)
	if err != nil {
		log.Warn("runs are disabled: "+err.Error()+"; set --data.dir to a writable directory", "data_dir", cfg.DataDir)
		return nil, nil
	}
	rc := runner.Config{Store: st, ProcFS: fs, Logger: log, Binary: cfg.LoadgenBinary, Pairs: pairs,
		AllowHostSettings: cfg.AllowHostSettings, StateDir: cfg.SettingsStateDir}
	if rc.Binary == "" {
		rc.Binary = FindLoadgen()
	}
	rc.Parent, rc.ParentErr = cgroup.ChooseParent(cfg.CgroupParent, cfg.ProcfsPath)
	if rc.ParentErr != nil {
		log.Warn("runs will be refused: " + rc.ParentErr.Error())
	}
	e, err := runner.New(rc)
	switch {
	case errors.Is(err, runner.ErrDataDirInUse):
		return nil, err
	case err != nil:
		log.Warn("cleaning up after a previous observer", "err", err)
	}
	return e, nil
}

// listenHosts are the hosts of the listen addresses, for the API's Host
// check: ":9752" listens on every address, "::".
func listenHosts(addrs []string) []string {
	var hosts []string
	for _, a := range addrs {
		h, _, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		if h == "" {
			h = "::"
		}
		hosts = append(hosts, h)
	}
	return hosts
}

// FindLoadgen finds the consumer binary: beside observer, else on PATH.
func FindLoadgen() string {
	if p, ok := FindBinary("loadgen"); ok {
		return p
	}
	return "loadgen (not found beside observer or on PATH)"
}

// FindBinary finds one of thrashscope's binaries beside this executable,
// else on PATH.
func FindBinary(name string) (string, bool) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	return "", false
}

// Handler serves the observer's endpoints.
func (o *Observer) Handler() http.Handler { return o.handler }

// Probes reports the probes' attach status; empty on procfs alone.
func (o *Observer) Probes() []readout.Status {
	if o.probe == nil {
		return nil
	}
	return o.probe.Status()
}

// Listen opens every listen address, so the caller learns the bound ports.
func Listen(addrs []string) ([]net.Listener, error) {
	var ls []net.Listener
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, fmt.Errorf("listening on %s: %w", a, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// Run samples and serves until ctx is done, then shuts down in order.
func (o *Observer) Run(ctx context.Context, listeners []net.Listener, webConfigFile string) error {
	// Each component starts and stops in one place, a run/interrupt pair;
	// the first to return stops the others, interrupted in the order they
	// are added: an active run is aborted and saved before the sampling
	// that records it stops, and the HTTP server goes last.
	var g rungroup.Group
	g.Add(func() error { <-ctx.Done(); return nil }, func(error) {})
	if o.runs != nil {
		stopped := make(chan struct{})
		g.Add(func() error { <-stopped; return nil }, func(error) {
			o.runs.Close()
			close(stopped)
		})
	}
	sampleCtx, stopSampling := context.WithCancel(context.Background())
	g.Add(func() error { o.pipeline.Run(sampleCtx); return nil }, func(error) { stopSampling() })
	o.addServer(&g, listeners, webConfigFile)
	err := g.Run()
	return errors.Join(err, o.Close())
}

// addServer adds the HTTP server to the group: it serves every listener,
// each held to serverLimits, and shuts down gracefully (5 s) when
// interrupted.
func (o *Observer) addServer(g *rungroup.Group, listeners []net.Listener, webConfigFile string) {
	srv := serverLimits.server(o.handler)
	for i, l := range listeners {
		listeners[i] = netutil.LimitListener(l, serverLimits.MaxConns)
	}
	flags := &web.FlagConfig{
		WebListenAddresses: &[]string{},
		WebSystemdSocket:   new(bool),
		WebConfigFile:      &webConfigFile,
	}
	scheme := schemeOf(webConfigFile)
	for _, l := range listeners {
		o.logger.Info("live page", "url", scheme+"://"+l.Addr().String()+"/")
	}
	g.Add(func() error {
		err := web.ServeMultiple(listeners, srv, flags, o.logger.With("component", "web"))
		if err == nil || errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serving HTTP: %w", err)
	}, func(error) {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.logger.Warn("shutting the HTTP server down", "err", err)
		}
	})
}

// limits bound what one client can hold of the server.
type limits struct {
	ReadHeader, Read, Write, Idle time.Duration
	MaxHeaderBytes, MaxConns      int
}

// serverLimits: a request has 5 s for its headers (at most 16 KiB with its
// request line) and 15 s in all (a run spec is under 64 KiB); a reply 60 s
// (a 64 MiB samples.csv,
// a 30 s pprof profile); a kept-alive connection idles 30 s; 256
// connections at once, past which new ones wait in the kernel's backlog.
// So a slow or idle client is cut within seconds, and /metrics and /healthz
// stay fast beside 100 of them (TestServerLimits).
var serverLimits = limits{
	ReadHeader: 5 * time.Second, Read: 15 * time.Second, Write: 60 * time.Second, Idle: 30 * time.Second,
	MaxHeaderBytes: 16 << 10, MaxConns: 256,
}

func (l limits) server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeader,
		ReadTimeout:       l.Read,
		WriteTimeout:      l.Write,
		IdleTimeout:       l.Idle,
		MaxHeaderBytes:    l.MaxHeaderBytes - headerSlop,
	}
}

// headerSlop is what net/http reads of a request's head past
// MaxHeaderBytes before it refuses it: taken off, so that the bound is
// the one documented.
const headerSlop = 4096

// schemeOf tells whether the web config turns TLS on, for the page's URL.
// A config that does not parse is left to the server to report.
func schemeOf(webConfigFile string) string {
	if webConfigFile == "" {
		return "http"
	}
	b, err := os.ReadFile(webConfigFile)
	if err != nil {
		return "http"
	}
	var c web.Config
	if yaml.Unmarshal(b, &c) != nil || (c.TLSConfig.TLSCertPath == "" && c.TLSConfig.TLSCert == "") {
		return "http"
	}
	return "https"
}

// Close detaches the probes. Run calls it; call it yourself only when Run
// was never called.
func (o *Observer) Close() error {
	if o.runs != nil {
		o.runs.Close()
	}
	if o.wake != nil {
		o.wake.Close()
		o.wake = nil
	}
	if o.probe == nil {
		return nil
	}
	err := o.probe.Close()
	o.probe = nil
	return err
}

// WakeStall is the memory stall (PSI some) within a PSI trigger's
// shortest window that wakes the sampler on procfs alone.
const WakeStall = 50 * time.Millisecond

// openWake arms, on procfs alone, the PSI trigger that wakes the sampler
// when memory pressure begins, or says why there is none: the sampler
// then keeps to its interval.
func openWake(cfg Config, logger *slog.Logger) *pressure.Trigger {
	t, err := pressure.Open(filepath.Join(cfg.ProcfsPath, "pressure", "memory"), WakeStall, pressure.MinWindow)
	if err != nil {
		logger.Warn("the sampler keeps to its interval, woken by no pressure: "+err.Error(), "component", "sampler")
		return nil
	}
	logger.Info("the sampler wakes when memory pressure begins (a PSI trigger)", "component", "sampler",
		"stall", WakeStall, "window", pressure.MinWindow)
	return t
}

// ErrCheckFailed is returned by Check when a required probe did not attach.
var ErrCheckFailed = errors.New("a required probe failed")

// Check loads and attaches every probe, takes one sample, prints a table of
// the probes, and detaches. It fails when BPF cannot load at all or when a
// required probe did not attach.
func Check(cfg Config, w io.Writer, logger *slog.Logger) error {
	cfg.Probes = ProbesBPF
	o, err := build(cfg, logger, true)
	if err != nil {
		return err
	}
	defer o.Close()
	if err := o.pipeline.Step(); err != nil {
		return fmt.Errorf("first sample: %w", err)
	}
	statuses := o.Probes()
	o.probe.WriteWay(w)
	probe.WriteStatusTable(w, statuses)
	for _, st := range statuses {
		if st.Required && !st.Attached {
			return fmt.Errorf("%w: %s: %v", ErrCheckFailed, st.Name, st.Err)
		}
	}
	return nil
}
