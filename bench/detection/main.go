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
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/bench/internal/stack"
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
	st, err := stack.Start(ctx, tmp, observerBin, promBin,
		[]string{filepath.Join(rulesDir, "thrashscope.yml"), filepath.Join(rulesDir, "node-exporter-baseline.yml")}, args...)
	defer st.Stop()
	if err != nil {
		return nil, err
	}
	time.Sleep(5 * time.Second) // a few scrapes of the quiet host first

	rec, abort, err := st.StartRun(spec)
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
	ds, err := watch(ctx, st, onset, end)
	if err != nil {
		return nil, err
	}
	report(out, ds, time.Since(onset))
	return ds, nil
}

// watch polls each detector until end: the observer's state every 100 ms,
// the host's PSI, and Prometheus's alerts every second; each detection is
// the time from onset to the first poll that saw it.
func watch(ctx context.Context, st *stack.Stack, onset, end time.Time) ([]detection, error) {
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
		thrashing := false
		_ = st.Scrape(func(line string) { thrashing = thrashing || line == "thrashscope_thrashing_state 2" })
		mark(0, thrashing)
		mark(1, psiSomeAvg10() > 10)
		if time.Since(lastProm) >= time.Second {
			lastProm = time.Now()
			alerts, _ := st.Alerts()
			for _, a := range alerts {
				if a.State == "firing" {
					mark(2, a.Labels["alertname"] == "ThrashscopeHostThrashing")
					mark(3, a.Labels["alertname"] == "NodeMajorFaultsBaseline")
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ds, nil
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
