// Package observer assembles the thrashscope daemon: the probes (or procfs
// alone), the sampler, the metrics and the HTTP server. It starts them in
// data-flow order and stops them in reverse: the sample loop, the BPF links
// and objects, then the HTTP server.
package observer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/thrashscope/thrashscope/internal/api"
	"github.com/thrashscope/thrashscope/internal/metrics"
	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// Observer is the assembled daemon.
type Observer struct {
	cfg      Config
	logger   *slog.Logger
	probe    *probe.Probe // nil on procfs alone
	sampler  *sampler.Sampler
	registry *prometheus.Registry
	handler  http.Handler
}

// New loads the probes as --probes says and builds everything else.
func New(cfg Config, logger *slog.Logger) (*Observer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	fs, err := procfs.NewFS(cfg.ProcfsPath)
	if err != nil {
		return nil, err
	}
	o := &Observer{cfg: cfg, logger: logger}

	if cfg.Probes != ProbesProcfs {
		p, err := probe.Load(probe.Options{SysfsPath: cfg.SysfsPath, Logger: logger.With("component", "probe")})
		switch {
		case err == nil:
			o.probe = p
		case cfg.Probes == ProbesBPF:
			return nil, err
		default:
			logger.Warn("running on procfs alone, without per-process stall times or fault kinds: "+err.Error(), "probes", "procfs")
		}
	}

	scfg := sampler.Config{
		ProcFS:   fs,
		Interval: cfg.SampleInterval,
		TopK:     cfg.TopK,
		Logger:   logger.With("component", "sampler"),
	}
	if o.probe != nil {
		scfg.Probe = o.probe
	}
	o.sampler = sampler.New(scfg)

	o.registry = prometheus.NewRegistry()
	o.registry.MustRegister(
		metrics.NewCollector(o.sampler),
		versioncollector.NewCollector("thrashscope"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	o.handler = api.NewHandler(api.Options{
		Gatherer: o.registry,
		Ready:    func() bool { _, ok := o.sampler.Latest(); return ok },
	})
	return o, nil
}

// Handler serves the observer's endpoints.
func (o *Observer) Handler() http.Handler { return o.handler }

// Probes reports the probes' attach status; empty on procfs alone.
func (o *Observer) Probes() []probe.Status {
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
	var wg sync.WaitGroup
	sampleCtx, stopSampling := context.WithCancel(ctx)
	wg.Go(func() { o.sampler.Run(sampleCtx) })

	srv := &http.Server{Handler: o.handler, ReadHeaderTimeout: 10 * time.Second}
	flags := &web.FlagConfig{
		WebListenAddresses: &[]string{},
		WebSystemdSocket:   new(bool),
		WebConfigFile:      &webConfigFile,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- web.ServeMultiple(listeners, srv, flags, o.logger.With("component", "web")) }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
		err = fmt.Errorf("serving HTTP: %w", err)
	}
	stopSampling()
	wg.Wait()
	closeErr := o.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := srv.Shutdown(shutdownCtx); serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, closeErr)
}

// Close detaches the probes. Run calls it; call it yourself only when Run
// was never called.
func (o *Observer) Close() error {
	if o.probe == nil {
		return nil
	}
	err := o.probe.Close()
	o.probe = nil
	return err
}

// ErrCheckFailed is returned by Check when a required probe did not attach.
var ErrCheckFailed = errors.New("a required probe failed")

// Check loads and attaches every probe, takes one sample, prints a table of
// the probes, and detaches. It fails when BPF cannot load at all or when a
// required probe did not attach.
func Check(cfg Config, w io.Writer, logger *slog.Logger) error {
	cfg.Probes = ProbesBPF
	o, err := New(cfg, logger)
	if err != nil {
		return err
	}
	defer o.Close()
	if err := o.sampler.SampleOnce(); err != nil {
		return fmt.Errorf("first sample: %w", err)
	}
	statuses := o.Probes()
	probe.WriteStatusTable(w, statuses)
	for _, st := range statuses {
		if st.Required && !st.Attached {
			return fmt.Errorf("%w: %s: %v", ErrCheckFailed, st.Name, st.Err)
		}
	}
	return nil
}
