package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/thrashscope/thrashscope/bench/internal/stack"
	"github.com/thrashscope/thrashscope/internal/procfs"
)

// trace is when one signal was on: its episodes, in order.
type trace struct {
	on  bool
	Eps []episode `json:"episodes"`
}

type episode struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

func (t *trace) set(on bool, now time.Time) {
	switch {
	case on && !t.on:
		t.Eps = append(t.Eps, episode{From: now})
	case !on && t.on:
		t.Eps[len(t.Eps)-1].To = now
	}
	t.on = on
}

func (t *trace) close(now time.Time) { t.set(false, now) }

// first is when it first came on at or after from.
func (t *trace) first(from time.Time) (time.Time, bool) {
	for _, e := range t.Eps {
		if !e.To.Before(from) {
			return maxTime(e.From, from), true
		}
	}
	return time.Time{}, false
}

// within counts the episodes and their time on, from from.
func (t *trace) within(from time.Time) (n int, on time.Duration) {
	for _, e := range t.Eps {
		if e.To.After(from) {
			n++
			on += e.To.Sub(maxTime(e.From, from))
		}
	}
	return n, on
}

// longest is its longest episode from from.
func (t *trace) longest(from time.Time) time.Duration {
	var most time.Duration
	for _, e := range t.Eps {
		if e.To.After(from) {
			most = max(most, e.To.Sub(maxTime(e.From, from)))
		}
	}
	return most
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// observation is what one scenario's watch saw.
type observation struct {
	Scenario string    `json:"scenario"`
	Thrash   bool      `json:"thrash"`
	Begin    time.Time `json:"begin"` // the workload started
	Onset    time.Time `json:"onset"` // demand first past the limit (thrash), or the benign load's moment
	// LimitMet is when the kernel first saw an induced run's group at its
	// limit (v1 memory.failcnt, v2 memory.events high or max), polled
	// every 10 ms until the onset. The plan's demand leaves out the
	// consumers' own runtime pages, so a slow climb can meet the limit
	// before its planned onset: nothing may be on before this moment.
	LimitMet time.Time `json:"limit_met,omitzero"`
	End      time.Time `json:"end"` // the workload ended
	// WatchedTo is when the watch stopped, past End.
	WatchedTo time.Time `json:"watched_to"`
	// Host is thrashing_state 2; Target the scenario's own cgroup at
	// cgroup_thrashing_state 2, AnyWorkload any cgroup at 2.
	Host, Target, AnyWorkload trace
	Alerts                    map[string]*trace
	// Named are the cgroups a workload alert named.
	Named map[string]bool `json:"named,omitempty"`
	// Kernel is what the host counted from the start of the workload to
	// its end; PeakBytes the most memory its own groups held (custom
	// workloads), the proof that a benign load did what it says.
	Kernel    kernelCounts `json:"kernel"`
	PeakBytes int64        `json:"peak_bytes,omitempty"`
	// WatchErrors counts the scrapes and alert reads that failed; Errors
	// are the first few.
	WatchErrors int      `json:"watch_errors,omitempty"`
	Errors      []string `json:"errors,omitempty"`
}

// namedSuffix marks an alert's trace counting only the instances that
// name the scenario's own cgroup.
const namedSuffix = "@target"

// rule is an alert of the rule files, with its severity, its hold (for)
// and its group's evaluation interval.
type rule struct {
	Alert    string            `json:"alert"`
	Labels   map[string]string `json:"labels"`
	For      string            `json:"for"`
	interval time.Duration
}

// bound is how late after an onset the rule may fire: its hold and two
// evaluations (one to see the condition, one to fire after the hold).
func (r rule) bound() time.Duration {
	hold, _ := time.ParseDuration(r.For)
	return hold + 2*r.interval
}

func readRules(files []string) ([]rule, error) {
	var out []rule
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var doc struct {
			Groups []struct {
				Interval string `json:"interval"`
				Rules    []rule `json:"rules"`
			} `json:"groups"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, g := range doc.Groups {
			// The bench's stack evaluates every second where a group
			// names no interval of its own.
			interval := time.Second
			if g.Interval != "" {
				d, err := time.ParseDuration(g.Interval)
				if err != nil {
					return nil, fmt.Errorf("%s: interval %q: %w", f, g.Interval, err)
				}
				interval = d
			}
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				if r.For != "" {
					if _, err := time.ParseDuration(r.For); err != nil {
						return nil, fmt.Errorf("%s: %s's for %q: %w", f, r.Alert, r.For, err)
					}
				}
				r.interval = interval
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// watch polls the observer every 100 ms (the host's state, every
// workload's) and Prometheus's active alerts every second until ctx ends.
func watch(ctx context.Context, st *stack.Stack, target func() string, o *observation) {
	o.Alerts = map[string]*trace{}
	var lastProm time.Time
	for ctx.Err() == nil {
		now := time.Now()
		var host, target2, any bool
		want := target()
		err := st.Scrape(func(line string) {
			switch {
			case line == "thrashscope_thrashing_state 2":
				host = true
			case strings.HasPrefix(line, "thrashscope_cgroup_thrashing_state{") && strings.HasSuffix(line, "} 2"):
				any = true
				if want != "" && strings.Contains(line, want+`"`) {
					target2 = true
				}
			}
		})
		if err == nil {
			o.Host.set(host, now)
			o.Target.set(target2, now)
			o.AnyWorkload.set(any, now)
		} else if ctx.Err() == nil {
			o.failed("scraping the observer", err)
		}
		if now.Sub(lastProm) >= time.Second {
			lastProm = now
			if alerts, err := st.Alerts(); err == nil {
				o.observeAlerts(alerts, want, now)
			} else if ctx.Err() == nil {
				o.failed("reading Prometheus's alerts", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	now := time.Now()
	o.WatchedTo = now
	o.Host.close(now)
	o.Target.close(now)
	o.AnyWorkload.close(now)
	for _, t := range o.Alerts {
		t.close(now)
	}
}

// maxWatchErrors bounds the errors an observation keeps (all are counted).
const maxWatchErrors = 5

// failed notes an error of the watch: a scenario whose watch missed a look
// cannot say that nothing fired then.
func (o *observation) failed(what string, err error) {
	o.WatchErrors++
	if len(o.Errors) < maxWatchErrors {
		o.Errors = append(o.Errors, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), what, err))
	}
}

// observeAlerts notes which alerts fire now, and the cgroups they name.
func (o *observation) observeAlerts(alerts []stack.Alert, want string, now time.Time) {
	firing := map[string]bool{}
	for _, a := range alerts {
		if a.State != "firing" {
			continue
		}
		name := a.Labels["alertname"]
		firing[name] = true
		if c := a.Labels["cgroup"]; c != "" {
			if want != "" && strings.HasSuffix(c, want) {
				firing[name+namedSuffix] = true
			}
			if o.Named == nil {
				o.Named = map[string]bool{}
			}
			o.Named[c] = true
		}
	}
	for name := range firing {
		if o.Alerts[name] == nil {
			o.Alerts[name] = &trace{}
		}
	}
	for name, t := range o.Alerts {
		t.set(firing[name], now)
	}
}

// kernelCounts are the host's own counts of what a scenario did: vmstat's
// major faults and swap traffic (pages), and PSI memory stall time.
type kernelCounts struct {
	MajorFaults uint64        `json:"major_faults"`
	SwapIns     uint64        `json:"swap_ins"`
	SwapOuts    uint64        `json:"swap_outs"`
	ReadKiB     uint64        `json:"read_kib"` // pgpgin: block reads
	PSISome     time.Duration `json:"psi_some"`
	PSIFull     time.Duration `json:"psi_full"`
}

func readKernelCounts() (kernelCounts, error) {
	var k kernelCounts
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return k, err
	}
	v, err := fs.VMStat()
	if err != nil {
		return k, err
	}
	k.MajorFaults, k.SwapIns, k.SwapOuts, k.ReadKiB = v.PgMajFault, v.PswpIn, v.PswpOut, v.PgpgIn
	p, err := fs.MemoryPressure()
	if err != nil {
		return k, err
	}
	k.PSISome, k.PSIFull = p.SomeTotal, p.FullTotal
	return k, nil
}

func (k kernelCounts) sub(o kernelCounts) kernelCounts {
	return kernelCounts{k.MajorFaults - o.MajorFaults, k.SwapIns - o.SwapIns, k.SwapOuts - o.SwapOuts, k.ReadKiB - o.ReadKiB, k.PSISome - o.PSISome, k.PSIFull - o.PSIFull}
}

func (k kernelCounts) String() string {
	return fmt.Sprintf("%d major faults, %d swap-ins, %d swap-outs, %d MiB read, PSI memory some %.1f s, full %.1f s",
		k.MajorFaults, k.SwapIns, k.SwapOuts, k.ReadKiB>>10, k.PSISome.Seconds(), k.PSIFull.Seconds())
}
