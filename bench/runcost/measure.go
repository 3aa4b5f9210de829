package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/bench/internal/benchproc"
	"github.com/thrashscope/thrashscope/internal/procfs"
)

// server is the observer or node_exporter, started for one part.
type server struct {
	cmd    *exec.Cmd
	addr   string
	stderr bytes.Buffer
}

func startServer(ctx context.Context, bin string, args ...string) (*server, error) {
	addr, err := benchproc.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	s := &server{addr: addr}
	s.cmd = exec.Command(bin, append([]string{"--web.listen-address=" + addr}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = &s.stderr, &s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	if err := benchproc.WaitReady(ctx, "http://"+addr+"/metrics", 30*time.Second); err != nil {
		s.stop()
		return nil, fmt.Errorf("%s: %w:\n%s", bin, err, s.stderr.String())
	}
	return s, nil
}

// stop sends SIGTERM and waits; SIGKILL after 15 s.
func (s *server) stop() { benchproc.Stop(s.cmd, 15*time.Second) }

// scrape GETs every server's /metrics every d until ctx is done, as a
// Prometheus would.
func scrape(ctx context.Context, d time.Duration, servers ...*server) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() {
			t := time.NewTicker(d)
			defer t.Stop()
			for {
				if resp, err := http.Get("http://" + s.addr + "/metrics"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	return &wg
}

// cpuSeconds is a process's utime+stime so far, from the kernel.
func cpuSeconds(fs procfs.FS, pid int) (float64, error) {
	p, err := fs.ProcessStat(pid)
	if err != nil {
		return 0, err
	}
	return p.UserSeconds + p.SystemSeconds, nil
}

// peakRSS is a process's VmHWM.
func peakRSS(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return benchproc.StatusKB(b, "VmHWM:")
}

// window measures both processes' CPU between start() and done(), and
// the observer's own count of what its diagnoses took.
type window struct {
	fs              procfs.FS
	obs, exp        *server
	began           time.Time
	obs0, ex0, dia0 float64
}

func (w *window) start() error {
	var err1, err2, err3 error
	w.began = time.Now()
	w.obs0, err1 = cpuSeconds(w.fs, w.obs.cmd.Process.Pid)
	w.ex0, err2 = cpuSeconds(w.fs, w.exp.cmd.Process.Pid)
	w.dia0, err3 = scrapeValue(w.obs.addr, diagnosisCPU)
	return errors.Join(err1, err2, err3)
}

func (w *window) done() (cost, error) {
	o, err1 := cpuSeconds(w.fs, w.obs.cmd.Process.Pid)
	e, err2 := cpuSeconds(w.fs, w.exp.cmd.Process.Pid)
	d, err3 := scrapeValue(w.obs.addr, diagnosisCPU)
	c := cost{
		Seconds:     time.Since(w.began).Seconds(),
		ObserverCPU: o - w.obs0, ExporterCPU: e - w.ex0, DiagnosisCPU: d - w.dia0,
		ObserverPeakRSS: peakRSS(w.obs.cmd.Process.Pid), Exporter: peakRSS(w.exp.cmd.Process.Pid),
	}
	return c, errors.Join(err1, err2, err3)
}

// diagnosisCPU is the observer's count of the CPU its diagnoses took.
const diagnosisCPU = "thrashscope_diagnosis_cpu_seconds_total"

// scrapeValue is the value of the unlabelled series name in the server's
// /metrics.
func scrapeValue(addr, name string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s in its /metrics", addr, name)
}

func startPair(ctx context.Context, cfg config, observerArgs ...string) (obs, exp *server, err error) {
	if obs, err = startServer(ctx, cfg.Observer, observerArgs...); err != nil {
		return nil, nil, err
	}
	if exp, err = startServer(ctx, cfg.NodeExporter); err != nil {
		obs.stop()
		return nil, nil, err
	}
	return obs, exp, nil
}

// startSession starts the observer (with observerArgs and a data dir of its
// own) beside node_exporter, scrapes both, and waits out their start-up.
// stop ends it all and removes the data dir.
func startSession(ctx context.Context, cfg config, observerArgs ...string) (w *window, stop func(), err error) {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return nil, nil, err
	}
	data, err := os.MkdirTemp("", "runcost-")
	if err != nil {
		return nil, nil, err
	}
	obs, exp, err := startPair(ctx, cfg, append([]string{"--data.dir=" + data}, observerArgs...)...)
	if err != nil {
		os.RemoveAll(data)
		return nil, nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	wg := scrape(sctx, cfg.Scrape, obs, exp)
	stop = func() {
		cancel()
		wg.Wait()
		obs.stop()
		exp.stop()
		os.RemoveAll(data)
	}
	// Start-up work (BPF loading, the first full read of every process)
	// dies down before a window opens.
	time.Sleep(3 * time.Second)
	return &window{fs: fs, obs: obs, exp: exp}, stop, nil
}

// measureRun starts a run through the observer and measures both from its
// start to its end.
func measureRun(ctx context.Context, cfg config) (cost, error) {
	w, stop, err := startSession(ctx, cfg, "--probes=bpf")
	if err != nil {
		return cost{}, err
	}
	defer stop()
	if err := w.start(); err != nil {
		return cost{}, err
	}
	base := "http://" + w.obs.addr + "/api/v1/runs"
	body := fmt.Sprintf(`{"preset":%q,"scale":%g}`, cfg.Preset, cfg.Scale)
	if cfg.Writes > 0 {
		body = fmt.Sprintf(`{"preset":%q,"scale":%g,"writes_per_cycle":%d}`, cfg.Preset, cfg.Scale, cfg.Writes)
	}
	resp, err := http.Post(base, "application/json", bytes.NewBufferString(body))
	if err != nil {
		return cost{}, err
	}
	var r runRecord
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &r) != nil {
		return cost{}, fmt.Errorf("starting the run: %d %s", resp.StatusCode, b)
	}
	if err := r.wait(ctx, base); err != nil {
		return cost{}, err
	}
	c, err := w.done()
	if r.State != "completed" {
		// A run cut short is not the load the ratio is judged on.
		return cost{}, fmt.Errorf("run %s ended %s after %.0f s, not completed: %s", r.ID, r.State, c.Seconds, r.Reason)
	}
	c.GuardCPU = r.GuardCPU
	return c, err
}

// runRecord is what the bench reads of a run's record.
type runRecord struct {
	ID        string  `json:"id"`
	State     string  `json:"state"`
	Reason    string  `json:"reason"`
	GuardCPU  float64 `json:"oom_guard_cpu_seconds"`
	Consumers []struct {
		PlannedEnd time.Time `json:"planned_end"`
	} `json:"consumers"`
}

// wait polls the run's record until it ends, at most 2 minutes past its
// planned end.
func (r *runRecord) wait(ctx context.Context, base string) error {
	var end time.Time
	for _, c := range r.Consumers {
		if c.PlannedEnd.After(end) {
			end = c.PlannedEnd
		}
	}
	deadline := end.Add(2 * time.Minute)
	for r.State == "running" || r.State == "" {
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s still %s 2 minutes past its planned end", r.ID, r.State)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollWait(time.Until(end))):
		}
		resp, err := http.Get(base + "/" + r.ID)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := json.Unmarshal(b, r); err != nil {
			return fmt.Errorf("reading run %s: %w: %s", r.ID, err, b)
		}
	}
	return nil
}

// pollWait is how long to wait before reading the run's record again,
// left before its planned end: every 10 s until then (a run that fails
// early is seen), every second after. A record read every second all
// through the run was the bench's own load on the observer, 5 % of its CPU
// (rendering a run of 25 consumers as JSON), which node_exporter beside it
// never had.
func pollWait(left time.Duration) time.Duration {
	switch {
	case left > 10*time.Second:
		return 10 * time.Second
	case left > time.Second:
		return left
	}
	return time.Second
}

// measureRest measures the observer, its probes loaded, beside
// node_exporter over cfg.Window, nothing run.
func measureRest(ctx context.Context, cfg config) (cost, error) {
	w, stop, err := startSession(ctx, cfg, "--probes=bpf")
	if err != nil {
		return cost{}, err
	}
	defer stop()
	return w.over(ctx, cfg.Window)
}

// over measures the window for d.
func (w *window) over(ctx context.Context, d time.Duration) (cost, error) {
	if err := w.start(); err != nil {
		return cost{}, err
	}
	select {
	case <-ctx.Done():
		return cost{}, ctx.Err()
	case <-time.After(d):
	}
	return w.done()
}

// measureProcfs starts cfg.Processes sleeping processes, then the observer
// on procfs alone beside node_exporter, and measures both over cfg.Window.
func measureProcfs(ctx context.Context, cfg config) (cost, error) {
	sleepers, err := startSleepers(cfg.Processes)
	defer sleepers.kill()
	if err != nil {
		return cost{}, err
	}
	w, stop, err := startSession(ctx, cfg, "--probes=procfs")
	if err != nil {
		return cost{}, err
	}
	defer stop()
	return w.over(ctx, cfg.Window)
}

// sleepers are processes in one process group of their own.
type sleepers struct{ pgid int }

// startSleepers starts n `sleep` processes in a new process group; each
// dies with this bench (PDEATHSIG) or at kill.
func startSleepers(n int) (*sleepers, error) {
	s := &sleepers{}
	for i := range n {
		cmd := exec.Command("sleep", "3600")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: s.pgid, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return s, fmt.Errorf("starting sleeping process %d of %d: %w", i+1, n, err)
		}
		if s.pgid == 0 {
			s.pgid = cmd.Process.Pid
		}
		go func() { _ = cmd.Wait() }() // reaped when killed
	}
	return s, nil
}

func (s *sleepers) kill() {
	if s.pgid > 0 {
		_ = syscall.Kill(-s.pgid, syscall.SIGKILL)
	}
}
