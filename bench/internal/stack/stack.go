// Package stack is what the alerting benchmarks share: bin/observer and a
// real Prometheus that scrapes it every second and evaluates rule files,
// both started as black boxes, a run induced over the observer's API, and
// what each says while it runs (a scrape's lines, the active alerts).
package stack

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/bench/internal/benchproc"
	"github.com/thrashscope/thrashscope/internal/run"
)

// Stack is a started observer and the Prometheus that scrapes it.
type Stack struct {
	ObserverAddr, PrometheusAddr string
	stops                        []func()
}

// Start starts the observer with args and a Prometheus that scrapes it every
// second with the rule files, both logging into dir, and waits until both
// are ready. Stop stops whichever started, also after an error.
func Start(ctx context.Context, dir, observerBin, promBin string, ruleFiles []string, args ...string) (*Stack, error) {
	s := &Stack{}
	var err error
	if s.ObserverAddr, err = benchproc.FreeLoopbackAddr(); err != nil {
		return s, err
	}
	if s.PrometheusAddr, err = benchproc.FreeLoopbackAddr(); err != nil {
		return s, err
	}
	obs, err := start(dir, "observer", observerBin, append([]string{"--web.listen-address=" + s.ObserverAddr,
		"--data.dir=" + filepath.Join(dir, "data"), "--sample.interval=1s"}, args...)...)
	if err != nil {
		return s, err
	}
	s.stops = append(s.stops, func() { benchproc.Stop(obs, 20*time.Second) })
	if err := benchproc.WaitReady(ctx, "http://"+s.ObserverAddr+"/readyz", 30*time.Second); err != nil {
		return s, fmt.Errorf("observer: %w (log in %s)", err, dir)
	}
	var files []string
	for _, f := range ruleFiles {
		abs, err := filepath.Abs(f)
		if err != nil {
			return s, err
		}
		files = append(files, fmt.Sprintf("%q", abs))
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%s]
scrape_configs:
  - job_name: thrashscope
    static_configs: [{targets: [%q]}]
`, strings.Join(files, ", "), s.ObserverAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		return s, err
	}
	prom, err := start(dir, "prometheus", promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+s.PrometheusAddr)
	if err != nil {
		return s, err
	}
	s.stops = append(s.stops, func() { benchproc.Stop(prom, 20*time.Second) })
	if err := benchproc.WaitReady(ctx, "http://"+s.PrometheusAddr+"/-/ready", 30*time.Second); err != nil {
		return s, fmt.Errorf("prometheus: %w (log in %s)", err, dir)
	}
	return s, nil
}

// Stop stops Prometheus, then the observer.
func (s *Stack) Stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.stops = nil
}

func start(dir, name, bin string, args ...string) (*exec.Cmd, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return cmd, nil
}

// StartRun posts the spec to the observer; abort ends the run and waits, for
// at most a minute, until it has.
func (s *Stack) StartRun(spec string) (rec run.Record, abort func(), err error) {
	base := "http://" + s.ObserverAddr + "/api/v1/runs"
	resp, err := http.Post(base, "application/json", strings.NewReader(spec))
	if err != nil {
		return rec, nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return rec, nil, fmt.Errorf("starting the run %s: %d %s", spec, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &rec); err != nil {
		return rec, nil, err
	}
	return rec, func() {
		req, _ := http.NewRequest(http.MethodDelete, base+"/"+rec.ID, nil)
		if r, err := http.DefaultClient.Do(req); err == nil {
			r.Body.Close()
		}
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if got, err := s.Run(rec.ID); err != nil || got.EndedAt != nil {
				return
			}
		}
	}, nil
}

// Run reads a run's record.
func (s *Stack) Run(id string) (run.Record, error) {
	var rec run.Record
	r, err := http.Get("http://" + s.ObserverAddr + "/api/v1/runs/" + id)
	if err != nil {
		return rec, err
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		return rec, fmt.Errorf("run %s: %s", id, r.Status)
	}
	return rec, json.NewDecoder(r.Body).Decode(&rec)
}

// Scrape calls line for each line of the observer's /metrics.
func (s *Stack) Scrape(line func(string)) error {
	r, err := http.Get("http://" + s.ObserverAddr + "/metrics")
	if err != nil {
		return err
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line(sc.Text())
	}
	return sc.Err()
}

// Alert is one active alert in Prometheus.
type Alert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"` // pending or firing
}

// Alerts lists Prometheus's active alerts.
func (s *Stack) Alerts() ([]Alert, error) {
	r, err := http.Get("http://" + s.PrometheusAddr + "/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	var body struct {
		Data struct {
			Alerts []Alert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		return nil, err
	}
	return body.Data.Alerts, nil
}
