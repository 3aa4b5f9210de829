package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"

	"github.com/thrashscope/thrashscope/internal/cgroup"
)

// The cost curves say what the observer costs as the work grows: against
// major faults a second (one filemajor child paced at each rate) and
// against workloads thrashing at once (swapin children, each in a memory
// cgroup of its own, each paced alike). One observer, as it ships and
// scraped every second as Prometheus would, sees every step; each step's
// window measures its daemon's CPU (/proc/<pid>/stat) and its BPF
// programs' run time (bpf_stats) against the children's own major faults
// (their /proc/<pid>/stat), so a rate the host cannot reach shows as what
// it reached.

// curveConfig is what --curves asks for.
type curveConfig struct {
	Curves          []string      // "faults", "workloads"
	Rates           []float64     // the faults curve's steps, touches a second
	Workloads       []int         // the workloads curve's steps
	PerWorkloadRate float64       // each swapin child's touches a second
	Window          time.Duration // each step's measured window
}

// curveRegionBytes and curveLimitBytes: a workloads-curve child pages
// through 8 MiB in a 4 MiB cgroup, so a hundred fit in the swap CI makes.
const (
	curveRegionBytes = 8 << 20
	curveLimitBytes  = curveRegionBytes / 2
)

// curvePoint is one step's window.
type curvePoint struct {
	Asked         float64 `json:"asked"` // touches a second, or workloads
	Workloads     int     `json:"workloads"`
	FaultsPerSec  float64 `json:"major_faults_per_sec"`
	ObserverCPU   float64 `json:"observer_cpu_percent_of_one_core"`
	BPFCPU        float64 `json:"bpf_cpu_percent_of_one_core"`
	BPFNsPerFault float64 `json:"bpf_ns_per_major_fault"`
	Seconds       float64 `json:"seconds"`
}

// costCurve is a curve's points and its slopes by least squares: the
// daemon's and the BPF programs' CPU (% of a core) per unit of X, X being
// major faults a second or workloads.
type costCurve struct {
	Name          string       `json:"name"`
	X             string       `json:"x"`
	Points        []curvePoint `json:"points"`
	ObserverSlope float64      `json:"observer_cpu_percent_per_x"`
	BPFSlope      float64      `json:"bpf_cpu_percent_per_x"`
}

// curveChild is one workload child of a step.
type curveChild struct {
	name   string
	rate   float64
	bytes  int
	limit  int64         // > 0: in a memory cgroup of its own with this limit
	warmup time.Duration // before its window may open
}

// swapinWarmup is one paced pass through a swapin child's region and a
// second more: its first pass finds the pages its fill paged out still in
// the swap cache (minor faults), so its major faults came at half their
// rate over a 3 s window opened after 1 s (79 a second against 157 over
// 10 s).
func swapinWarmup(bytes int, rate float64) time.Duration {
	return time.Duration(float64(bytes/4096)/rate*float64(time.Second)) + time.Second
}

// runCurves measures each curve asked for with one observer.
func (b *bench) runCurves(ctx context.Context, cc curveConfig) (curves []costCurve, err error) {
	obs, err := startObserver(ctx, b.cfg.ObserverBin, b.cfg.ProbesWay, b.cfg.ReadyTimeout, b.cfg.Settle, b.logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if stopErr := obs.stop(b.cfg.StopTimeout, b.logger); stopErr != nil && err == nil {
			err = stopErr
		}
	}()
	sctx, stopScrapes := context.WithCancel(ctx)
	defer stopScrapes()
	go scrapeEverySecond(sctx, "http://"+obs.addr+"/metrics")
	for _, name := range cc.Curves {
		c := costCurve{Name: name, X: "major faults a second"}
		steps := len(cc.Rates)
		if name == "workloads" {
			c.X, steps = "workloads", len(cc.Workloads)
		}
		for i := range steps {
			var children []curveChild
			var asked float64
			if name == "faults" {
				asked = cc.Rates[i]
				children = []curveChild{{name: "filemajor", rate: asked, bytes: majorFaultRegionBytes, warmup: time.Second}}
			} else {
				asked = float64(cc.Workloads[i])
				for range cc.Workloads[i] {
					children = append(children, curveChild{name: "swapin", rate: cc.PerWorkloadRate, bytes: curveRegionBytes,
						limit: curveLimitBytes, warmup: swapinWarmup(curveRegionBytes, cc.PerWorkloadRate)})
				}
			}
			p, err := b.curveStep(ctx, obs, children, cc.Window)
			if err != nil {
				return curves, fmt.Errorf("the %s curve at %g: %w", name, asked, err)
			}
			p.Asked = asked
			b.logger.Info("curve step", "curve", name, "asked", asked, "major_faults_per_sec", int64(p.FaultsPerSec),
				"observer_cpu", fmt.Sprintf("%.2f%%", p.ObserverCPU), "bpf_cpu", fmt.Sprintf("%.2f%%", p.BPFCPU))
			c.Points = append(c.Points, p)
		}
		c.fit()
		curves = append(curves, c)
	}
	return curves, nil
}

// fit sets the slopes: against faults a second for the faults curve,
// against workloads for the other.
func (c *costCurve) fit() {
	var x, obs, bpf []float64
	for _, p := range c.Points {
		if c.Name == "faults" {
			x = append(x, p.FaultsPerSec)
		} else {
			x = append(x, float64(p.Workloads))
		}
		obs = append(obs, p.ObserverCPU)
		bpf = append(bpf, p.BPFCPU)
	}
	c.ObserverSlope, c.BPFSlope = slope(x, obs), slope(x, bpf)
}

// slope is y's least-squares slope on x; 0 when x does not vary.
func slope(x, y []float64) float64 {
	n := float64(len(x))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// scrapeEverySecond reads url every second until ctx ends, as a
// Prometheus server would: what serving a scrape costs is in the figures.
func scrapeEverySecond(ctx context.Context, url string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if resp, err := http.Get(url); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
}

// startedChild is a running curve child: stdin held open until the step
// ends, the start line awaited.
type startedChild struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	started chan struct{}
	cg      *cgroup.Cgroup
	stderr  *tailBuffer
}

// curveStep starts the children, waits until every one has warmed up,
// measures one window, then stops them (their stdin closed: each cleans up)
// and removes their cgroups.
func (b *bench) curveStep(ctx context.Context, obs *observerProcess, specs []curveChild, window time.Duration) (p curvePoint, err error) {
	var kids []*startedChild
	defer func() { err = errors.Join(err, stopChildren(kids)) }()
	for _, s := range specs {
		k, err := b.startCurveChild(ctx, s)
		if err != nil {
			return p, err
		}
		kids = append(kids, k)
	}
	deadline := time.After(30*time.Second + specs[0].warmup + time.Duration(len(specs))*500*time.Millisecond)
	for _, k := range kids {
		select {
		case <-k.started:
		case <-deadline:
			return p, fmt.Errorf("%d workload children did not all warm up in time", len(kids))
		case <-ctx.Done():
			return p, ctx.Err()
		}
	}
	return b.measureWindow(ctx, obs, kids, window)
}

// measureWindow measures one window of a step whose children are warm:
// the daemon's CPU and its programs' BPF time against their major faults.
func (b *bench) measureWindow(ctx context.Context, obs *observerProcess, kids []*startedChild, window time.Duration) (p curvePoint, err error) {
	// Opened now: a program the observer loads on demand is loaded by then.
	open := b.openBPFStats
	if open == nil {
		open = openKernelBPFStats
	}
	progs, err := open(b.cfg.ProcRoot, obs.pid(), b.logger)
	if err != nil {
		return p, err
	}
	defer progs.Close()
	at := func() (countersSnapshot, uint64, uint64, time.Time, error) {
		snap, err := progs.snapshot()
		if err != nil {
			return nil, 0, 0, time.Time{}, err
		}
		ticks, err := readProcessCPUTicks(b.cfg.ProcRoot, obs.pid())
		if err != nil {
			return nil, 0, 0, time.Time{}, err
		}
		faults, err := childrenMajorFaults(b.cfg.ProcRoot, kids)
		return snap, ticks, faults, time.Now(), err
	}
	snap0, ticks0, faults0, t0, err := at()
	if err != nil {
		return p, err
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return p, ctx.Err()
	}
	snap1, ticks1, faults1, t1, err := at()
	if err != nil {
		return p, err
	}
	if err := obs.alive(); err != nil {
		return p, err
	}
	delta, err := countersDelta(snap0, snap1)
	if err != nil {
		return p, err
	}
	secs := t1.Sub(t0).Seconds()
	faults := faults1 - faults0
	bpfNs := float64(totalRunTimeNs(delta))
	p = curvePoint{
		Workloads:    len(kids),
		FaultsPerSec: float64(faults) / secs,
		ObserverCPU:  float64(ticks1-ticks0) / float64(b.ticksPerSecond) / secs * 100,
		BPFCPU:       bpfNs / 1e9 / secs * 100,
		Seconds:      secs,
	}
	if faults > 0 {
		p.BPFNsPerFault = bpfNs / float64(faults)
	}
	return p, nil
}

// startCurveChild runs one workload child until its stdin closes.
func (b *bench) startCurveChild(ctx context.Context, s curveChild) (*startedChild, error) {
	k := &startedChild{started: make(chan struct{}), stderr: newTailBuffer(4 << 10)}
	args := []string{workloadCommand, s.name, "--warmup", s.warmup.String(), "--duration", "1h", "--until-stdin-closes",
		"--rate", strconv.FormatFloat(s.rate, 'f', -1, 64), "--region", strconv.Itoa(s.bytes)}
	if s.limit > 0 {
		cg, err := workloadCgroup(s.limit)
		if err != nil {
			return nil, err
		}
		k.cg = cg
		args = append(args, "--cgroup", cg.Path)
	}
	k.cmd = exec.CommandContext(ctx, b.cfg.Exe, args...)
	k.cmd.Stderr = k.stderr
	stdin, err := k.cmd.StdinPipe()
	if err == nil {
		k.stdin = stdin
		var stdout io.ReadCloser
		if stdout, err = k.cmd.StdoutPipe(); err == nil {
			if err = k.cmd.Start(); err == nil {
				go k.awaitStart(stdout)
				return k, nil
			}
		}
	}
	if k.cg != nil {
		err = errors.Join(err, destroyCgroup(k.cg))
	}
	return nil, fmt.Errorf("starting a %s child: %w", s.name, err)
}

// awaitStart closes started on the child's start line, then drains its
// output.
func (k *startedChild) awaitStart(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	once := false
	for sc.Scan() {
		if !once && strings.TrimSpace(sc.Text()) == childStartLine {
			close(k.started)
			once = true
		}
	}
}

// stopChildren closes every child's stdin, waits for each (killing one
// that outlives 30 s) and removes their cgroups.
func stopChildren(kids []*startedChild) error {
	var errs []error
	for _, k := range kids {
		k.stdin.Close()
	}
	for _, k := range kids {
		done := make(chan error, 1)
		go func() { done <- k.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				errs = append(errs, fmt.Errorf("a workload child: %w; its output:\n%s", err, k.stderr))
			}
		case <-time.After(30 * time.Second):
			_ = k.cmd.Process.Kill()
			<-done
			errs = append(errs, errors.New("a workload child did not stop within 30 s of its stdin closing, and was killed"))
		}
		if k.cg != nil {
			errs = append(errs, destroyCgroup(k.cg))
		}
	}
	return errors.Join(errs...)
}

func destroyCgroup(cg *cgroup.Cgroup) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cg.Destroy(ctx)
}

// childrenMajorFaults is the major faults the children have taken so far.
func childrenMajorFaults(procRoot string, kids []*startedChild) (uint64, error) {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, k := range kids {
		p, err := fs.Proc(k.cmd.Process.Pid)
		if err != nil {
			return 0, fmt.Errorf("a workload child: %w", err)
		}
		st, err := p.Stat()
		if err != nil {
			return 0, fmt.Errorf("a workload child's stat: %w", err)
		}
		n += uint64(st.MajFlt)
	}
	return n, nil
}

// writeCurves prints the curves as one Markdown table (bench/README
// keeps it as printed, and make test holds its rows), then their slopes.
func writeCurves(w io.Writer, curves []costCurve) error {
	fmt.Fprintln(w, "| curve | asked | workloads | major faults/s | daemon CPU, % of a core | BPF CPU, % of a core | BPF ns a fault |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, c := range curves {
		for _, p := range c.Points {
			fmt.Fprintf(w, "| %s | %s | %d | %s | %.2f | %.2f | %s |\n", c.Name, thousands(p.Asked), p.Workloads,
				thousands(p.FaultsPerSec), p.ObserverCPU, p.BPFCPU, thousands(p.BPFNsPerFault))
		}
	}
	fmt.Fprintln(w)
	for _, c := range curves {
		if c.Name == "faults" {
			fmt.Fprintf(w, "faults: the daemon %+.3f %% of a core and its BPF programs %+.3f %% per 1,000 major faults a second (%s ns a fault)\n",
				c.ObserverSlope*1000, c.BPFSlope*1000, thousands(c.BPFSlope*1e7))
		} else {
			fmt.Fprintf(w, "workloads: the daemon %+.3f %% of a core and its BPF programs %+.3f %% per workload thrashing\n", c.ObserverSlope, c.BPFSlope)
		}
	}
	return nil
}

// thousands is v rounded, with commas between thousands.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// curveFlags defines --curves and its steps on fs; the function it returns
// validates them into cc once fs is parsed.
func curveFlags(fs *flag.FlagSet, cc *curveConfig) func() error {
	curves := fs.String("curves", "", "instead of the rounds, the cost curves: faults (against major faults a second), workloads (against workloads thrashing at once), or both")
	rates := fs.String("curve.rates", "1000,3000,10000,30000,100000", "the faults curve's steps, in page touches a second of one filemajor child (each a major fault)")
	counts := fs.String("curve.workloads", "1,3,10,30,100", "the workloads curve's steps, in swapin children at once, each in a memory cgroup of its own")
	fs.Float64Var(&cc.PerWorkloadRate, "curve.rate-each", 200, "each workloads-curve child's page touches a second (about half are major faults)")
	fs.DurationVar(&cc.Window, "curve.window", 10*time.Second, "each curve step's measured window")
	return func() error { return parseCurves(cc, *curves, *rates, *counts) }
}

// parseCurves validates --curves and its steps.
func parseCurves(cc *curveConfig, curves, rates, counts string) error {
	if curves == "" {
		return nil
	}
	for name := range strings.SplitSeq(curves, ",") {
		name = strings.TrimSpace(name)
		if name != "faults" && name != "workloads" {
			return fmt.Errorf("--curves: unknown curve %q, want faults, workloads or both", name)
		}
		cc.Curves = append(cc.Curves, name)
	}
	for f := range strings.SplitSeq(rates, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 || r > 1e6 {
			return fmt.Errorf("--curve.rates: %q is not a rate from 1 to 1,000,000 touches a second", f)
		}
		cc.Rates = append(cc.Rates, r)
	}
	for f := range strings.SplitSeq(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 200 {
			return fmt.Errorf("--curve.workloads: %q is not a count from 1 to 200 (each a child in a cgroup of its own)", f)
		}
		cc.Workloads = append(cc.Workloads, n)
	}
	if cc.PerWorkloadRate <= 0 || cc.PerWorkloadRate > 1e5 {
		return fmt.Errorf("--curve.rate-each must be from 1 to 100,000 touches a second, got %g", cc.PerWorkloadRate)
	}
	if cc.Window < time.Second {
		return fmt.Errorf("--curve.window must be at least 1s (the CPU clock ticks 100 times a second), got %v", cc.Window)
	}
	return nil
}

// runCurves is --curves' main: the curves, their tables, and --json.
func runCurves(ctx context.Context, b *bench) error {
	curves, err := b.runCurves(ctx, b.cfg.Curves)
	if err != nil {
		return err
	}
	if err := writeCurves(os.Stdout, curves); err != nil {
		return err
	}
	if b.cfg.JSONPath == "" {
		return nil
	}
	out, err := json.MarshalIndent(struct {
		Config reportConfig `json:"config"`
		Curves []costCurve  `json:"curves"`
	}{b.reportConfig(), curves}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(b.cfg.JSONPath, append(out, '\n'), 0o644)
}
