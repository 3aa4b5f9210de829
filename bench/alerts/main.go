// Command alerts measures thrashscope's detectors and shipped alerts for
// misses and false alarms, side by side with the peers' rules. Each
// scenario is a real workload on this host, labelled: a thrash with a known
// onset (demand first past the memory limit), which every detector should
// catch, or a benign load (a cold scan, a backup, a start-up storm, a
// readback from swap, proactive reclaim) on which no alert should fire. Each
// runs under a fresh bin/observer scraped every second by a real
// Prometheus evaluating deploy/prometheus/rules/thrashscope.yml and the
// peers' rules (node-exporter-baseline.yml) on the same data. It prints
// one table, a row per detector or rule and a column per scenario, and
// exits non-zero when a cell breaks the suite's bounds (judge: a detector
// or a thrash alert late or never, anything on before a thrash's onset, a
// benign load that did not do what its label says or that raised a
// warning, a critical alert or a state held past its alert's hold, a
// failed look of the watch).
// Invoked by `make bench`; see bench/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/bench/internal/stack"
	"github.com/thrashscope/thrashscope/bench/internal/zram"
	"github.com/thrashscope/thrashscope/internal/cgroup"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "work" {
		if err := work(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "alerts:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.StringVar(&o.observer, "observer", "bin/observer", "the observer binary")
	flag.StringVar(&o.prometheus, "prometheus", "prometheus", "the Prometheus server binary")
	flag.StringVar(&o.rules, "rules", "deploy/prometheus/rules", "directory of thrashscope.yml and node-exporter-baseline.yml")
	only := flag.String("only", "", "comma-separated scenarios to run (default all): "+strings.Join(names(scenarios), ","))
	flag.DurationVar(&o.after, "after", 30*time.Second, "how long to keep watching after each workload ends")
	flag.BoolVar(&o.keep, "keep", false, "keep each scenario's directory in /var/tmp (the observer's and Prometheus's logs, the TSDB)")
	jsonOut := flag.String("json", "", "also write every observation to this file")
	from := flag.String("from", "", "print the table from a --json file instead of running")
	markdown := flag.Bool("markdown", false, "print the table as Markdown")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rules, err := readRules(o.ruleFiles())
	if err != nil {
		fail(err)
	}
	obs, err := o.observations(ctx, *from, *only, *jsonOut)
	if err != nil {
		fail(err)
	}
	t := tabulate(rules, obs)
	if *markdown {
		legend(os.Stdout, obs)
		t.markdown(os.Stdout)
	} else {
		t.text(os.Stdout)
	}
	if problems := judge(rules, obs); len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "\nalerts: "+strings.Join(problems, "\nalerts: "))
		os.Exit(1)
	}
}

// observations runs the scenarios picked (writing each to jsonOut as it
// ends), or reads them from a --json file.
func (o options) observations(ctx context.Context, from, only, jsonOut string) ([]*observation, error) {
	var obs []*observation
	if from != "" {
		b, err := os.ReadFile(from)
		if err != nil {
			return nil, err
		}
		return obs, json.Unmarshal(b, &obs)
	}
	picked, err := pick(only)
	if err != nil {
		return nil, err
	}
	for i, s := range picked {
		fmt.Printf("== %d of %d: %s: %s\n", i+1, len(picked), s.name, s.what)
		ob, err := o.run(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		obs = append(obs, ob)
		if jsonOut != "" {
			b, _ := json.MarshalIndent(obs, "", "  ")
			if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
				return nil, err
			}
		}
	}
	return obs, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "alerts:", err)
	os.Exit(1)
}

func names(ss []scenario) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.name)
	}
	return out
}

func pick(only string) ([]scenario, error) {
	if only == "" {
		return scenarios, nil
	}
	var out []scenario
	for _, n := range strings.Split(only, ",") {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == n })
		if i < 0 {
			return nil, fmt.Errorf("--only: no scenario %q; there are %s", n, strings.Join(names(scenarios), ", "))
		}
		out = append(out, scenarios[i])
	}
	return out, nil
}

type options struct {
	observer, prometheus, rules string
	after                       time.Duration
	keep                        bool
	log                         func(format string, args ...any)
}

func (o options) ruleFiles() []string {
	return []string{filepath.Join(o.rules, "thrashscope.yml"), filepath.Join(o.rules, "node-exporter-baseline.yml")}
}

func (o options) logf(format string, args ...any) {
	if o.log != nil {
		o.log(format, args...)
		return
	}
	fmt.Printf(format+"\n", args...)
}

// quiet is how long the stack watches the quiet host before the workload.
const quiet = 5 * time.Second

// run runs one scenario on a fresh observer and Prometheus and returns what
// was seen, from the quiet before it to --after past its end.
func (o options) run(ctx context.Context, s scenario) (ob *observation, err error) {
	tmp, err := os.MkdirTemp("/var/tmp", "thrashscope-alerts-")
	if err != nil {
		return nil, err
	}
	if o.keep {
		o.logf("keeping %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	if s.zram {
		undo, zerr := zram.Swap()
		if zerr != nil {
			return nil, zerr
		}
		defer func() { err = errors.Join(err, undo()) }()
	}
	st, err := o.stack(ctx, tmp)
	defer st.Stop()
	if err != nil {
		return nil, err
	}
	j, done, err := prepare(ctx, s, tmp)
	defer done()
	if err != nil {
		return nil, err
	}
	return o.observe(ctx, s, st, j)
}

// observe watches the quiet host, then the scenario's workload (its job j,
// or a run induced over the API when j is nil) and --after past its end,
// with the kernel's counts of what it did.
func (o options) observe(ctx context.Context, s scenario, st *stack.Stack, j *job) (*observation, error) {
	ob := &observation{Scenario: s.name, Thrash: s.thrash}
	var target atomic.Value // the cgroup to be named, once known
	target.Store("")
	if j != nil {
		target.Store(j.target)
	}
	stopWatch := goWatch(ctx, st, &target, ob)
	defer stopWatch()
	if err := sleep(ctx, quiet); err != nil {
		return nil, err
	}

	before, err := readKernelCounts()
	if err != nil {
		return nil, err
	}
	if j == nil {
		err = o.induce(ctx, st, s, ob, &target)
	} else {
		// The custom workload starts at its begin.
		ob.Begin = time.Now()
		if ob.Onset, err = j.begin(); err == nil {
			err = j.wait(ctx)
		}
	}
	if err != nil {
		return nil, err
	}
	ob.End = time.Now()
	after, err := readKernelCounts()
	if err != nil {
		return nil, err
	}
	ob.Kernel = after.sub(before)
	if j != nil {
		if ob.PeakBytes, err = j.peak(); err != nil {
			return nil, fmt.Errorf("the peak memory of %s's groups: %w", s.name, err)
		}
	}
	o.logf("workload over %s after its start (%s); watching %s more", ob.End.Sub(ob.Begin).Round(100*time.Millisecond), ob.Kernel, o.after)
	if err := sleep(ctx, o.after); err != nil {
		return nil, err
	}
	stopWatch()
	return ob, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// goWatch watches on a goroutine of its own until stop, which returns once
// the watch has written its last into ob and may be called again.
func goWatch(ctx context.Context, st *stack.Stack, target *atomic.Value, ob *observation) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watch(wctx, st, func() string { return target.Load().(string) }, ob)
	}()
	return func() { cancel(); <-watched }
}

// prepare readies a scenario's own workload, nil for a run over the API;
// done stops it and removes its groups, and is never nil.
func prepare(ctx context.Context, s scenario, tmp string) (j *job, done func(), err error) {
	if s.custom == nil {
		return nil, func() {}, nil
	}
	e, err := newEnv(tmp)
	if err != nil {
		return nil, func() {}, err
	}
	if j, err = s.custom(ctx, e); err != nil {
		return nil, e.close, err
	}
	j.peak = e.peak
	return j, func() { j.stop(); e.close() }, nil
}

// stack starts the observer, counting a run's cgroup as one workload, and
// Prometheus with the rules.
func (o options) stack(ctx context.Context, tmp string) (*stack.Stack, error) {
	depth, err := runDepth()
	if err != nil {
		return &stack.Stack{}, err
	}
	return stack.Start(ctx, tmp, o.observer, o.prometheus, o.ruleFiles(), fmt.Sprintf("--cgroup.depth=%d", depth))
}

// induce starts the scenario's run over the observer's API and waits until
// it ends, or its bound has passed and it is aborted; the onset is when its
// plan first puts demand past its limit.
func (o options) induce(ctx context.Context, st *stack.Stack, s scenario, ob *observation, target *atomic.Value) error {
	rec, abort, err := st.StartRun(s.spec)
	if err != nil {
		return err
	}
	defer abort()
	onset, ok := rec.Spec.Onset()
	if rec.Spec.Traits().Work && rec.Spec.SizeBytes > rec.Spec.MemoryLimitBytes {
		// A run of fixed work first runs one consumer alone, from its
		// start: one too large for the limit thrashes from there.
		onset, ok = 0, true
	}
	if !ok {
		return fmt.Errorf("the run %s never passes its limit", s.spec)
	}
	ob.Begin, ob.Onset = rec.StartedAt, rec.StartedAt.Add(onset)
	target.Store("/" + cgroup.Prefix + "run-" + rec.ID)
	bound := 10 * time.Minute
	if s.bound > 0 {
		bound = onset + s.bound
	}
	o.logf("run %s: %s; demand past the %d MiB limit %s in; watching until it ends or %s in", rec.ID, s.spec, rec.Spec.MemoryLimitBytes>>20, onset, bound)
	met := make(chan time.Time, 1)
	stopMet := make(chan struct{})
	go func() { met <- firstAtLimit(st, rec.ID, ob.Onset, stopMet) }()
	defer func() {
		close(stopMet)
		ob.LimitMet = <-met
	}()
	for deadline := rec.StartedAt.Add(bound); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r, err := st.Run(rec.ID); err == nil && r.EndedAt != nil {
			break
		}
	}
	return nil
}

// firstAtLimit is when the kernel first saw run id's memory group at its
// limit, polled every 10 ms until the onset; zero if not by then.
func firstAtLimit(st *stack.Stack, id string, onset time.Time, stop <-chan struct{}) time.Time {
	dir := ""
	for ; time.Now().Before(onset); time.Sleep(10 * time.Millisecond) {
		select {
		case <-stop:
			return time.Time{}
		default:
		}
		if dir == "" {
			if r, err := st.Run(id); err == nil {
				dir = r.Cgroup
			}
			continue
		}
		if atLimit(dir) {
			return time.Now()
		}
	}
	return time.Time{}
}

// runDepth is the depth of a run's cgroup (beneath this process's own in
// the unified hierarchy, where the observer started by the bench makes its
// runs): the observer's --cgroup.depth, so that a run is one workload, its
// consumers' groups folded in, and so is each scenario's own group.
func runDepth() (int, error) {
	own, err := cgroup.OwnUnified("/proc")
	if err != nil {
		return 0, fmt.Errorf("a cgroup2 group of this process: %w", err)
	}
	h, err := cgroup.UnifiedHierarchy("/proc")
	if err != nil {
		return 0, err
	}
	rel, err := filepath.Rel(h.Point, own.Path)
	if err != nil {
		return 0, err
	}
	return strings.Count(strings.Trim(filepath.Join(h.Root, rel, "run"), "/"), "/") + 1, nil
}
