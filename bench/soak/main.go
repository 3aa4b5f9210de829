// Command soak runs the observer through a long run and watches its own
// resources: every --every it reads the observer's resident memory (VmRSS)
// and open file descriptors from the kernel, and its goroutines and Go heap
// from its /metrics, while /metrics is scraped every --scrape and the run's
// record and the live page's status are read as a browser would. It keeps
// watching for --after once the run has ended, then prints the samples and,
// for each series, the least-squares slope over the second half of the
// watch: by then the live page's 15-minute history is full, so what still
// grows is a leak. It exits 1 when a slope is above its bound.
//
// Invoked by `make soak` (root, swap; about 30 minutes); see bench/README.md.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/thrashscope/thrashscope/bench/internal/benchproc"
	"github.com/thrashscope/thrashscope/internal/live"
)

type config struct {
	Observer string
	Spec     string
	Scrape   time.Duration
	Every    time.Duration
	After    time.Duration
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	flat, err := run(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if !flat {
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.StringVar(&c.Observer, "observer", "bin/observer", "the observer binary (bin/loadgen beside it)")
	fs.StringVar(&c.Spec, "spec", `{"preset":"e2","scale":0.1}`, "the run spec to POST")
	fs.DurationVar(&c.Scrape, "scrape", time.Second, "how often /metrics is scraped")
	fs.DurationVar(&c.Every, "every", 10*time.Second, "how often the observer's resources are read")
	fs.DurationVar(&c.After, "after", 5*time.Minute, "how long to keep watching once the run has ended")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case c.Scrape < 100*time.Millisecond:
		return c, fmt.Errorf("--scrape=%s: want at least 100ms", c.Scrape)
	case c.Every < time.Second:
		return c, fmt.Errorf("--every=%s: want at least 1s", c.Every)
	case c.After < 0 || c.After > time.Hour:
		return c, fmt.Errorf("--after=%s: want 0 to 1h", c.After)
	case !json.Valid([]byte(c.Spec)):
		return c, fmt.Errorf("--spec=%q: not JSON; e.g. %s", c.Spec, `{"preset":"e2","scale":0.1}`)
	}
	if os.Geteuid() != 0 {
		return c, errors.New("needs root: the observer loads BPF programs and the run makes a cgroup")
	}
	return c, nil
}

// sample is the observer's resources at one moment.
type sample struct {
	At         time.Duration // since the observer was ready
	RSS        uint64        // VmRSS, bytes
	FDs        int           // entries in /proc/<pid>/fd
	Goroutines float64       // go_goroutines
	HeapInuse  float64       // go_memstats_heap_inuse_bytes
	RunState   string
}

// series are the watched quantities, each with the bound its slope over
// the second half must stay under, per hour.
var series = []struct {
	name, unit string
	get        func(sample) float64
	scale      float64 // printed value = get / scale
	bound      float64 // per hour, in printed units
}{
	{"rss", "MiB", func(s sample) float64 { return float64(s.RSS) }, 1 << 20, 2},
	{"heap_inuse", "MiB", func(s sample) float64 { return s.HeapInuse }, 1 << 20, 2},
	{"goroutines", "", func(s sample) float64 { return s.Goroutines }, 1, 2},
	{"open_fds", "", func(s sample) float64 { return float64(s.FDs) }, 1, 2},
}

func run(ctx context.Context, cfg config, out io.Writer) (bool, error) {
	data, err := os.MkdirTemp("", "soak-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(data)
	addr, err := benchproc.FreeLoopbackAddr()
	if err != nil {
		return false, err
	}
	base := "http://" + addr
	var logBuf bytes.Buffer
	cmd := exec.Command(cfg.Observer, "--web.listen-address="+addr, "--data.dir="+data)
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("starting %s: %w", cfg.Observer, err)
	}
	defer benchproc.Stop(cmd, 20*time.Second) // SIGTERM aborts a run still going
	if err := benchproc.WaitReady(ctx, base+"/readyz", 30*time.Second); err != nil {
		return false, fmt.Errorf("%w\n%s", err, logBuf.String())
	}
	ready := time.Now()
	id, err := startRun(base, cfg.Spec)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(out, "run %s (%s) through the observer (pid %d), /metrics scraped every %s, resources read every %s\n", id, cfg.Spec, cmd.Process.Pid, cfg.Scrape, cfg.Every)
	fmt.Fprintf(out, "%8s %10s %10s %10s %8s  %s\n", "t", "rss_MiB", "heap_MiB", "goroutines", "fds", "run")

	sctx, stopScrape := context.WithCancel(ctx)
	defer stopScrape()
	go every(sctx, cfg.Scrape, func() { _ = get(base + "/metrics") })
	// What a browser on the live page and a client polling the run do.
	go every(sctx, 5*time.Second, func() {
		_ = get(base + "/live/status")
		for _, f := range live.FigureNames {
			_ = get(base + "/live/figures/" + f + ".svg")
		}
		_ = get(base + "/api/v1/runs/" + id)
	})

	samples, err := follow(ctx, cfg, out, cmd.Process.Pid, base, id, ready)
	if err != nil {
		return false, err
	}
	return report(out, samples), nil
}

// follow reads the observer's resources every cfg.Every, printing each
// sample, until cfg.After past the run's end.
func follow(ctx context.Context, cfg config, out io.Writer, pid int, base, id string, ready time.Time) ([]sample, error) {
	var samples []sample
	var ended time.Time
	tick := time.NewTicker(cfg.Every)
	defer tick.Stop()
	for {
		s, err := read(pid, base, id)
		if err != nil {
			return nil, err
		}
		s.At = time.Since(ready)
		samples = append(samples, s)
		fmt.Fprintf(out, "%7.0fs %10.1f %10.1f %10.0f %8d  %s\n", s.At.Seconds(), float64(s.RSS)/(1<<20), s.HeapInuse/(1<<20), s.Goroutines, s.FDs, s.RunState)
		if ended.IsZero() && s.RunState != "pending" && s.RunState != "running" {
			ended = time.Now()
		}
		if !ended.IsZero() && time.Since(ended) >= cfg.After {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	return samples, nil
}

// report prints each series' slope over the second half and whether it
// is within its bound.
func report(out io.Writer, samples []sample) bool {
	half := samples[len(samples)/2:]
	if len(half) < 3 {
		fmt.Fprintln(out, "too few samples for a slope")
		return false
	}
	fmt.Fprintf(out, "slopes over the second half (%s to %s), per hour:\n", half[0].At.Round(time.Second), half[len(half)-1].At.Round(time.Second))
	flat := true
	for _, sr := range series {
		slope, lo, hi := slopePerHour(half, sr.get)
		slope, lo, hi = slope/sr.scale, lo/sr.scale, hi/sr.scale
		verdict := "flat"
		if slope > sr.bound {
			verdict, flat = fmt.Sprintf("GROWING (bound %g %s/h)", sr.bound, sr.unit), false
		}
		fmt.Fprintf(out, "  %-11s %+8.2f %s/h  (second half %.1f to %.1f %s)  %s\n", sr.name, slope, sr.unit, lo, hi, sr.unit, verdict)
	}
	return flat
}

// slopePerHour is the least-squares slope of get over time, per hour, with
// the range of get.
func slopePerHour(samples []sample, get func(sample) float64) (slope, lo, hi float64) {
	xs := make([]float64, len(samples))
	ys := make([]float64, len(samples))
	for i, s := range samples {
		xs[i], ys[i] = s.At.Hours(), get(s)
		if i == 0 || ys[i] < lo {
			lo = ys[i]
		}
		if i == 0 || ys[i] > hi {
			hi = ys[i]
		}
	}
	_, slope = stat.LinearRegression(xs, ys, nil, false)
	return slope, lo, hi
}

// read takes one sample: memory and fds from the kernel, goroutines and
// heap from the observer's own metrics.
func read(pid int, base, id string) (sample, error) {
	var s sample
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("the observer is gone: %w", err)
	}
	s.RSS = benchproc.StatusKB(st, "VmRSS:")
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.FDs = len(fds)
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return s, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "go_goroutines":
			s.Goroutines, _ = strconv.ParseFloat(val, 64)
		case "go_memstats_heap_inuse_bytes":
			s.HeapInuse, _ = strconv.ParseFloat(val, 64)
		}
	}
	resp.Body.Close()
	resp, err = http.Get(base + "/api/v1/runs/" + id)
	if err != nil {
		return s, err
	}
	var rec struct {
		State string `json:"state"`
	}
	err = json.NewDecoder(resp.Body).Decode(&rec)
	resp.Body.Close()
	s.RunState = rec.State
	return s, err
}

func startRun(base, spec string) (string, error) {
	resp, err := http.Post(base+"/api/v1/runs", "application/json", strings.NewReader(spec))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var rec struct {
		ID string `json:"id"`
	}
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &rec) != nil {
		return "", fmt.Errorf("starting the run: %d %s", resp.StatusCode, b)
	}
	return rec.ID, nil
}

func get(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
