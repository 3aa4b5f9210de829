package main

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// curveHeld are the cost curves' steps make test measures again, each
// over a short window, and the slack it allows the committed row: twice
// its figure, plus two clock ticks of the daemon's CPU over the window.
// The window is the curves' own: a workload's major faults climb over its
// first passes, so a shorter one reads fewer.
var curveHeld = curveConfig{
	Curves: []string{"faults", "workloads"}, Rates: []float64{1000, 10000}, Workloads: []int{1, 10},
	PerWorkloadRate: 200, Window: 10 * time.Second,
}

// committedCurveRow is bench/README's row of the curves table for a curve
// and step: its major faults a second, daemon CPU and BPF ns a fault.
func committedCurveRow(t *testing.T, curve string, asked float64) (faults, cpu, bpfNs float64) {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\| ` + curve + ` \| ` + regexp.QuoteMeta(thousands(asked)) + ` \| \d+ \| ([0-9,]+) \| ([0-9.]+) \| [0-9.]+ \| ([0-9,]+) \|$`)
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("bench/README.md has no row of the cost curves' table for %s at %s (as go run ./bench/overhead --curves prints it)", curve, thousands(asked))
	}
	num := func(s []byte) float64 {
		v, err := strconv.ParseFloat(strings.ReplaceAll(string(s), ",", ""), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return num(m[1]), num(m[2]), num(m[3])
}

// TestCostCurvesHeld: bench/README's cost curves, two steps of each
// measured again with the real observer over 10 s windows: each step
// reaches half its committed major faults a second (or it proves
// nothing), and its daemon CPU and BPF time a fault stay within twice the
// committed row (the CPU plus two 10 ms ticks over the window). A change
// that makes the daemon's cost grow with the faults or the workloads it
// watches fails here; make bench draws the whole curves.
func TestCostCurvesHeld(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	b := &bench{
		cfg: config{
			ObserverBin: testenv.Binary(t, "observer"), ProbesWay: "auto", Settle: time.Second,
			ReadyTimeout: 30 * time.Second, StopTimeout: 10 * time.Second, ProcRoot: "/proc", Exe: testBinary(t),
		},
		logger:         quietLogger(),
		ticksPerSecond: clockTicksPerSecond(),
	}
	curves, err := b.runCurves(context.Background(), curveHeld)
	if err != nil {
		t.Fatal(err)
	}
	tick := 2 / float64(b.ticksPerSecond) / curveHeld.Window.Seconds() * 100
	for _, c := range curves {
		for _, p := range c.Points {
			faults, cpu, bpfNs := committedCurveRow(t, c.Name, p.Asked)
			testenv.Figure(t, "cost curve "+c.Name+" at "+thousands(p.Asked), "%s major faults/s, the daemon %.2f %% of a core (committed %.2f), BPF %s ns a fault (committed %s)",
				thousands(p.FaultsPerSec), p.ObserverCPU, cpu, thousands(p.BPFNsPerFault), thousands(bpfNs))
			if p.FaultsPerSec < faults/2 {
				t.Errorf("%s at %s: %.0f major faults a second, under half the committed %.0f: the step did not load the observer as the curve did", c.Name, thousands(p.Asked), p.FaultsPerSec, faults)
			}
			if p.ObserverCPU > 2*cpu+tick {
				t.Errorf("%s at %s: the daemon used %.2f %% of a core, over twice the committed %.2f %% plus two ticks (%.2f %%): its cost grew with the work; draw the curves with go run ./bench/overhead --curves faults,workloads", c.Name, thousands(p.Asked), p.ObserverCPU, cpu, tick)
			}
			if p.BPFNsPerFault > 2*bpfNs {
				t.Errorf("%s at %s: %.0f ns of BPF a major fault, over twice the committed %.0f", c.Name, thousands(p.Asked), p.BPFNsPerFault, bpfNs)
			}
		}
	}
}
