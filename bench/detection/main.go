// Command detection measures how fast thrashscope notices a thrash. It sits
// beside the data flow: it runs bin/observer and a real Prometheus as black
// boxes, induces a run over the HTTP API, and times, from the moment the
// schedule's demand first exceeds the memory limit, when each signal fires:
// thrashscope_thrashing_state=2, PSI memory some avg10 above 10 %, the
// ThrashscopeHostThrashing alert, and a node_exporter-style major-fault
// rule evaluated by the same Prometheus on the same data. It does so
// --runs times with the observer as shipped and as many with its wakes off
// (--no-sample.wake, the sampler keeping to its interval),
// interleaved, each on a fresh observer and Prometheus, and judges the
// median of thrashing_state with the wakes against --max.
// Invoked by `make bench`; see bench/README.md.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/bench/internal/benchproc"
	"github.com/thrashscope/thrashscope/internal/run"
)

// arm is one way of running the observer.
type arm struct {
	name string
	args []string
}

var arms = []arm{
	{name: "wakes on (default)"},
	{name: "wakes off", args: []string{"--no-sample.wake"}},
}

func main() {
	observer := flag.String("observer", "bin/observer", "the observer binary (loadgen beside it)")
	prometheus := flag.String("prometheus", "prometheus", "the Prometheus server binary")
	rules := flag.String("rules", "deploy/prometheus/rules", "directory of thrashscope.yml and node-exporter-baseline.yml")
	spec := flag.String("spec", `{"preset":"e4","scale":0.1,"writes_per_cycle":10000}`, "the run to induce (W = 10,000 kept at scale 0.1: the load the README's detection figures were measured under)")
	after := flag.Duration("after", 30*time.Second, "how long to keep watching after each run ends")
	runs := flag.Int("runs", 5, "runs of each arm, interleaved")
	maxLatency := flag.Duration("max", time.Second, "most the median of thrashing_state=2 after the onset may be, wakes on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *runs < 1 {
		fmt.Fprintln(os.Stderr, "detection: --runs must be at least 1")
		os.Exit(2)
	}
	results := make([][][]detection, len(arms))
	for i := range 2 * *runs {
		a := i % 2
		if i/2%2 == 1 {
			a = 1 - a // ABBA: neither arm goes first every time
		}
		fmt.Printf("\n== run %d of %d: %s\n", i+1, 2**runs, arms[a].name)
		ds, err := detect(ctx, *observer, *prometheus, *rules, *spec, *after, arms[a].args, os.Stdout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "detection:", err)
			os.Exit(1)
		}
		results[a] = append(results[a], ds)
	}
	fmt.Println()
	median := summarize(os.Stdout, results)
	if median > *maxLatency {
		fmt.Fprintf(os.Stderr, "detection: thrashing_state=2 came a median %s after the onset with wakes on, past %s\n", median, *maxLatency)
		os.Exit(1)
	}
}

func detect(ctx context.Context, observerBin, promBin, rulesDir, spec string, after time.Duration, args []string, out io.Writer) ([]detection, error) {
	tmp, err := os.MkdirTemp("", "thrashscope-detection-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	obsAddr, promAddr := freeAddr(), freeAddr()
	stop, err := startStack(ctx, tmp, observerBin, promBin, rulesDir, obsAddr, promAddr, args)
	defer stop()
	if err != nil {
		return nil, err
	}
	time.Sleep(5 * time.Second) // a few scrapes of the quiet host first

	rec, abort, err := startRun(obsAddr, spec)
	if err != nil {
		return nil, err
	}
	defer abort()
	onsetOffset, ok := rec.Spec.Onset()
	if !ok {
		return nil, fmt.Errorf("the run never overcommits its limit: nothing to detect")
	}
	onset := rec.StartedAt.Add(onsetOffset)
	end := rec.StartedAt.Add(rec.Spec.Duration()).Add(after)
	fmt.Fprintf(out, "run %s: %s, demand exceeds the %d MiB limit at %s; watching until %s after the run\n",
		rec.ID, strings.TrimSpace(spec), rec.Spec.MemoryLimitBytes>>20, onsetOffset, after)
	ds, err := watch(ctx, obsAddr, promAddr, onset, end)
	if err != nil {
		return nil, err
	}
	report(out, ds, time.Since(onset))
	return ds, nil
}

// startStack starts the observer and a Prometheus that scrapes it every
// second with the project's rules, and waits until both are ready; stop
// stops whichever started, and is never nil.
func startStack(ctx context.Context, tmp, observerBin, promBin, rulesDir, obsAddr, promAddr string, args []string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	obs, err := start(tmp, "observer", observerBin, append([]string{"--web.listen-address=" + obsAddr, "--data.dir=" + filepath.Join(tmp, "data"), "--sample.interval=1s"}, args...)...)
	if err != nil {
		return stop, err
	}
	stops = append(stops, func() { benchproc.Stop(obs, 20*time.Second) })
	if err := benchproc.WaitReady(ctx, "http://"+obsAddr+"/readyz", 30*time.Second); err != nil {
		return stop, fmt.Errorf("observer: %w (log in %s)", err, tmp)
	}
	rulesAbs, _ := filepath.Abs(rulesDir)
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q, %q]
scrape_configs:
  - job_name: thrashscope
    static_configs: [{targets: [%q]}]
`, filepath.Join(rulesAbs, "thrashscope.yml"), filepath.Join(rulesAbs, "node-exporter-baseline.yml"), obsAddr)
	if err := os.WriteFile(filepath.Join(tmp, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		return stop, err
	}
	prom, err := start(tmp, "prometheus", promBin, "--config.file="+filepath.Join(tmp, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(tmp, "tsdb"), "--web.listen-address="+promAddr)
	if err != nil {
		return stop, err
	}
	stops = append(stops, func() { benchproc.Stop(prom, 20*time.Second) })
	if err := benchproc.WaitReady(ctx, "http://"+promAddr+"/-/ready", 30*time.Second); err != nil {
		return stop, fmt.Errorf("prometheus: %w (log in %s)", err, tmp)
	}
	return stop, nil
}

// startRun posts the spec to the observer; abort ends the run.
func startRun(obsAddr, spec string) (rec run.Record, abort func(), err error) {
	resp, err := http.Post("http://"+obsAddr+"/api/v1/runs", "application/json", strings.NewReader(spec))
	if err != nil {
		return rec, nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return rec, nil, fmt.Errorf("starting the run: %d %s", resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &rec); err != nil {
		return rec, nil, err
	}
	return rec, func() {
		req, _ := http.NewRequest(http.MethodDelete, "http://"+obsAddr+"/api/v1/runs/"+rec.ID, nil)
		if r, err := http.DefaultClient.Do(req); err == nil {
			r.Body.Close()
		}
	}, nil
}

// watch polls each detector until end: the observer's state every 100 ms,
// the host's PSI, and Prometheus's alerts every second; each detection is
// the time from onset to the first poll that saw it.
func watch(ctx context.Context, obsAddr, promAddr string, onset, end time.Time) ([]detection, error) {
	ds := []detection{{name: "thrashing_state=2 (observer)"}, {name: "PSI memory some avg10 > 10%"},
		{name: "ThrashscopeHostThrashing alert firing"}, {name: "node_exporter-style rule firing"}}
	mark := func(i int, ok bool) {
		if ok && !ds[i].fired {
			ds[i].fired, ds[i].after = true, time.Since(onset)
		}
	}
	lastProm := time.Time{}
	for time.Now().Before(end) {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		mark(0, scrapeHas("http://"+obsAddr+"/metrics", "thrashscope_thrashing_state 2"))
		mark(1, psiSomeAvg10() > 10)
		if time.Since(lastProm) >= time.Second {
			lastProm = time.Now()
			firing := alertsFiring("http://" + promAddr + "/api/v1/alerts")
			mark(2, firing["ThrashscopeHostThrashing"])
			mark(3, firing["NodeMajorFaultsBaseline"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ds, nil
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
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

func scrapeHas(url, line string) bool {
	r, err := http.Get(url)
	if err != nil {
		return false
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if sc.Text() == line {
			return true
		}
	}
	return false
}

func psiSomeAvg10() float64 {
	b, err := os.ReadFile("/proc/pressure/memory")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	for f := range strings.FieldsSeq(string(line)) {
		if v, ok := strings.CutPrefix(f, "avg10="); ok {
			x, _ := strconv.ParseFloat(v, 64)
			return x
		}
	}
	return 0
}

func alertsFiring(url string) map[string]bool {
	out := map[string]bool{}
	r, err := http.Get(url)
	if err != nil {
		return out
	}
	defer r.Body.Close()
	var body struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if json.NewDecoder(r.Body).Decode(&body) == nil {
		for _, a := range body.Data.Alerts {
			if a.State == "firing" {
				out[a.Labels["alertname"]] = true
			}
		}
	}
	return out
}
