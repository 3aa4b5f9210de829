// Package compare runs one run spec under several thrash-control policies,
// each repeated, interleaved (none, tpf, binpack, none, tpf, binpack, ...)
// so that a drift of the host over time does not favour one policy, and
// sums each run up: makespan, swap-ins, major faults, slowdowns, peak PSI
// full, lateness. It writes one table (mean ± SD over the repeats) and one
// figure.
package compare

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/thrashscope/thrashscope/internal/analysis"
	"github.com/thrashscope/thrashscope/internal/figures"
	"github.com/thrashscope/thrashscope/internal/outdir"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/report"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/standalone"
	"github.com/thrashscope/thrashscope/internal/stats"
	"github.com/thrashscope/thrashscope/internal/store"
)

// MaxRepeats bounds the repeats a comparison asks for.
const MaxRepeats = 20

// Config is one comparison.
type Config struct {
	Spec     run.Spec
	Policies []string
	Repeats  int
	// OutDir holds the runs (runs/<id>/) and the comparison's files.
	OutDir string
	// Binary is the loadgen executable the consumers run as.
	Binary     string
	ProcfsPath string
	// Progress receives a line per run started and ended.
	Progress io.Writer
	// Timeout, when set, bounds each run: one still going after it is
	// aborted, kept as aborted with the work it did, and the comparison
	// goes on. A policy that makes no progress on a slow swap device
	// would otherwise hold the host for the 4 h a run may last.
	Timeout time.Duration
}

// Order is the interleaved order of the runs: each policy once, repeated.
func Order(policies []string, repeats int) []string {
	var out []string
	for range repeats {
		out = append(out, policies...)
	}
	return out
}

// Validate checks the policies and repeats.
func (c Config) Validate() error {
	if len(c.Policies) < 1 {
		return errors.New("--policy: name at least one (" + strings.Join(policy.Names(), ", ") + ")")
	}
	seen := map[string]bool{}
	for _, p := range c.Policies {
		if !slices.Contains(policy.Names(), p) {
			return fmt.Errorf("--policy=%q: want one of %s", p, strings.Join(policy.Names(), ", "))
		}
		if seen[p] {
			return fmt.Errorf("--policy=%s is given twice: give each policy once", p)
		}
		seen[p] = true
	}
	if c.Repeats < 1 || c.Repeats > MaxRepeats {
		return fmt.Errorf("--repeats=%d: want 1 to %d", c.Repeats, MaxRepeats)
	}
	if c.Spec.Policy != nil {
		return errors.New("the spec names a policy: leave it out, --policy gives them")
	}
	if c.Timeout < 0 || c.Timeout > run.MaxRunDuration {
		return fmt.Errorf("--timeout=%s: want 0 (none) up to %s, the longest a run may last", c.Timeout, run.MaxRunDuration)
	}
	return nil
}

// Run carries the comparison out, one run at a time, and writes the table
// (compare.txt) and the figure (compare.png, compare.svg) under OutDir. A
// cancelled ctx aborts the run in progress and stops.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var ids []string
	for i, pol := range Order(cfg.Policies, cfg.Repeats) {
		spec := cfg.Spec
		spec.Policy = &pol
		fmt.Fprintf(cfg.Progress, "run %d of %d: policy %s\n", i+1, len(cfg.Policies)*cfg.Repeats, pol)
		rec, err := standalone.Run(ctx, standalone.Config{
			Spec: spec, OutDir: cfg.OutDir, Binary: cfg.Binary, ProcfsPath: cfg.ProcfsPath,
			Progress: io.Discard, Timeout: cfg.Timeout,
		})
		if err != nil {
			return nil, fmt.Errorf("run %d (policy %s): %w", i+1, pol, err)
		}
		line := fmt.Sprintf("run %d of %d: %s %s", i+1, len(cfg.Policies)*cfg.Repeats, rec.ID, rec.State)
		if rec.MakespanSeconds > 0 {
			line += fmt.Sprintf(", makespan %.1f s", rec.MakespanSeconds)
		} else if rec.Reason != "" {
			line += ": " + rec.Reason
		}
		fmt.Fprintln(cfg.Progress, line)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("stopped after run %s: %w", rec.ID, ctx.Err())
		}
		ids = append(ids, rec.ID)
	}
	recorded, err := report.Load(cfg.OutDir, ids)
	if err != nil {
		return nil, err
	}
	var results []Result
	for _, r := range recorded {
		results = append(results, resultOf(r))
	}
	return results, Write(cfg.OutDir, results)
}

// Redraw writes the comparison of the ended runs already under dir (a
// comparison's --out), oldest first: after one was interrupted, or to
// draw it anew.
func Redraw(dir string) ([]Result, error) {
	d, err := store.OpenExisting(dir)
	if err != nil {
		return nil, err
	}
	recs, err := d.Records()
	if err != nil {
		return nil, err
	}
	// A run left out would drop its policy's row, or a repeat, from a
	// table that then looks whole: every run under dir is compared, or
	// none is.
	var ids []string
	var unusable []string
	for _, rec := range slices.Backward(recs) { // Records lists the newest first
		switch {
		case rec.State == run.StateCorrupt:
			unusable = append(unusable, fmt.Sprintf("run %s is corrupt (%s)", rec.ID, rec.Reason))
		case run.Active(rec.State):
			unusable = append(unusable, fmt.Sprintf("run %s is still %s (in progress, or left so by a comparison that was killed; restore or remove runs/%s)", rec.ID, rec.State, rec.ID))
		default:
			ids = append(ids, rec.ID)
		}
	}
	if len(unusable) > 0 {
		return nil, fmt.Errorf("cannot compare the runs under %s: %s; nothing was written", dir, strings.Join(unusable, "; "))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no ended run under %s to compare", dir)
	}
	recorded, err := report.Load(dir, ids)
	if err != nil {
		return nil, err
	}
	var results []Result
	for _, r := range recorded {
		results = append(results, resultOf(r))
	}
	return results, Write(dir, results)
}

// Result is one run as the comparison presents it: its id and state and
// its figures (package analysis measures them).
type Result struct {
	ID, State string
	// Reason is why a run did not complete (aborted, failed).
	Reason string
	// PlannedCycles is the work a run of fixed work was given, over all
	// its consumers; 0 for a timed run.
	PlannedCycles uint64
	analysis.Totals
	PeakPSIFull float64 // % of an interval
	// Device is the emulated swap device the run had, and what was
	// emulated (run.Record.DeviceLine); empty on the host's own swap.
	Device string
}

// resultOf presents one run's figures.
func resultOf(r analysis.Recorded) Result {
	f := analysis.Measure(r)
	return Result{ID: f.Summary.ID, State: f.Summary.State, Reason: r.Record.Reason,
		PlannedCycles: uint64(r.Record.Spec.Cycles) * uint64(len(r.Record.Consumers)),
		Totals:        f.Totals, PeakPSIFull: f.Summary.PeakPSIFull, Device: r.Record.DeviceLine()}
}

// devices are the comparison's swap devices, in the order first seen: one
// for a comparison's runs, more for a redraw of runs made apart.
func devices(rs []Result) []string {
	var ds []string
	for _, r := range rs {
		d := cmp.Or(r.Device, "the host's own swap")
		if !slices.Contains(ds, d) {
			ds = append(ds, d)
		}
	}
	return ds
}

// metric is one column of the table and one panel of the figure.
type metric struct {
	name, unit string
	of         func(Result) float64
}

var metrics = []metric{
	{"makespan", "s", func(r Result) float64 { return r.MakespanSeconds }},
	{"swap-ins", "pages", func(r Result) float64 { return r.SwapIns }},
	{"major faults", "", func(r Result) float64 { return r.MajorFaults }},
	{"mean slowdown", "×", func(r Result) float64 { return r.MeanSlowdown }},
	{"worst slowdown", "×", func(r Result) float64 { return r.WorstSlowdown }},
	{"peak PSI full", "%", func(r Result) float64 { return r.PeakPSIFull }},
	{"mean lateness", "s", func(r Result) float64 { return r.MeanLatenessSeconds }},
	{"cycles per swap-in", "", func(r Result) float64 { return r.CyclesPerSwapIn }},
}

// byPolicy groups results by policy, in the order policies first appear.
func byPolicy(rs []Result) (order []string, groups map[string][]Result) {
	groups = map[string][]Result{}
	for _, r := range rs {
		if _, ok := groups[r.Policy]; !ok {
			order = append(order, r.Policy)
		}
		groups[r.Policy] = append(groups[r.Policy], r)
	}
	return order, groups
}

// Table is the comparison as a Markdown table: one row per policy, each
// cell the mean ± SD over its repeats (n in the last column).
func Table(rs []Result) string {
	var b strings.Builder
	if ds := devices(rs); len(ds) > 1 || ds[0] != "the host's own swap" {
		fmt.Fprintf(&b, "Swap device: %s.\n\n", strings.Join(ds, "; and "))
	}
	b.WriteString("| policy |")
	for _, m := range metrics {
		if m.unit != "" {
			fmt.Fprintf(&b, " %s (%s) |", m.name, m.unit)
		} else {
			fmt.Fprintf(&b, " %s |", m.name)
		}
	}
	b.WriteString(" runs |\n|---|")
	b.WriteString(strings.Repeat("---:|", len(metrics)+1) + "\n")
	order, groups := byPolicy(rs)
	for _, p := range order {
		fmt.Fprintf(&b, "| %s |", p)
		for _, m := range metrics {
			var vs []float64
			for _, r := range groups[p] {
				if v := m.of(r); !math.IsNaN(v) {
					vs = append(vs, v)
				}
			}
			b.WriteString(" " + cell(vs) + " |")
		}
		var ids []string
		for _, r := range groups[p] {
			ids = append(ids, r.ID)
		}
		fmt.Fprintf(&b, " %d (%s) |\n", len(groups[p]), strings.Join(ids, ", "))
	}
	consumerTable(&b, order, groups)
	unfinished(&b, rs)
	return b.String()
}

// unfinished names each run that did not complete, why, and how much of
// its work it did: its makespan and slowdowns are left out of the table
// above, its swap-ins and cycles per swap-in are what it did until then.
func unfinished(b *strings.Builder, rs []Result) {
	first := true
	for _, r := range rs {
		if r.State == run.StateCompleted {
			continue
		}
		if first {
			b.WriteString("\nRuns that did not complete (no makespan or slowdown; their other figures are up to their end):\n")
			first = false
		}
		fmt.Fprintf(b, "- %s (%s): %s, %s", r.ID, r.Policy, r.State, cmp.Or(r.Reason, "no reason recorded"))
		if r.PlannedCycles > 0 {
			fmt.Fprintf(b, "; %d of its %d write cycles done (%.1f %%)", r.Cycles, r.PlannedCycles, 100*float64(r.Cycles)/float64(r.PlannedCycles))
		}
		b.WriteString("\n")
	}
}

// maxConsumerColumns bounds the per-consumer table: runs of a few
// consumers (pair) are compared consumer by consumer.
const maxConsumerColumns = 4

// consumerTable adds, for runs of up to four consumers, each consumer's
// major faults, time held by the policy and slowdown, by policy.
func consumerTable(b *strings.Builder, order []string, groups map[string][]Result) {
	n := 0
	for _, rs := range groups {
		for _, r := range rs {
			n = max(n, len(r.Consumers))
		}
	}
	if n == 0 || n > maxConsumerColumns {
		return
	}
	b.WriteString("\n| policy |")
	for i := range n {
		name := run.ConsumerName(i)
		fmt.Fprintf(b, " %s major faults | %s held (s) | %s slowdown (×) |", name, name, name)
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", 3*n) + "\n")
	for _, p := range order {
		fmt.Fprintf(b, "| %s |", p)
		for i := range n {
			for _, of := range []func(analysis.ConsumerTotals) float64{
				func(c analysis.ConsumerTotals) float64 { return c.MajorFaults },
				func(c analysis.ConsumerTotals) float64 { return c.HeldSeconds },
				func(c analysis.ConsumerTotals) float64 { return c.Slowdown },
			} {
				var vs []float64
				for _, r := range groups[p] {
					if i < len(r.Consumers) {
						if v := of(r.Consumers[i]); !math.IsNaN(v) {
							vs = append(vs, v)
						}
					}
				}
				b.WriteString(" " + cell(vs) + " |")
			}
		}
		b.WriteString("\n")
	}
}

func cell(vs []float64) string {
	if len(vs) == 0 {
		return "–"
	}
	mean, sd := stats.MeanSD(vs)
	f := func(v float64) string {
		switch a := math.Abs(v); {
		case a >= 1000:
			return fmt.Sprintf("%.0f", v)
		case a >= 10:
			return fmt.Sprintf("%.1f", v)
		case a >= 0.1 || a == 0:
			return fmt.Sprintf("%.2f", v)
		default:
			return fmt.Sprintf("%.3g", v)
		}
	}
	if len(vs) == 1 {
		return f(mean)
	}
	return f(mean) + " ± " + f(sd)
}

// Charts are the figure's panels: each measure per repeat, one curve a
// policy.
func Charts(rs []Result) []figures.Chart {
	order, groups := byPolicy(rs)
	var charts []figures.Chart
	for _, m := range metrics[:6] {
		zero := 0.0
		c := figures.Chart{Title: m.name, XLabel: "repeat (the policies interleaved)", YLabel: strings.TrimSpace(m.name + " " + paren(m.unit)), YMin: &zero}
		for _, p := range order {
			s := figures.Series{Name: p}
			for i, r := range groups[p] {
				if v := m.of(r); !math.IsNaN(v) {
					s.X, s.Y = append(s.X, float64(i+1)), append(s.Y, v)
				}
			}
			c.Series = append(c.Series, s)
		}
		charts = append(charts, c)
	}
	return charts
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

// Write writes compare.txt and the figure under dir, never through a link
// (see package outdir).
func Write(dir string, rs []Result) error {
	if len(rs) == 0 {
		return errors.New("no run to compare")
	}
	out, err := outdir.Open(dir, 0o755)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	defer out.Close()
	if err := out.WriteFile("compare.txt", []byte(Table(rs)), 0o644); err != nil {
		return err
	}
	c := Charts(rs)
	rows := [][]figures.Chart{c[:3], c[3:]}
	for _, f := range []figures.Format{figures.PNG, figures.SVG} {
		var b bytes.Buffer
		title := "policies compared"
		if ds := devices(rs); len(ds) > 1 || ds[0] != "the host's own swap" {
			name, _, _ := strings.Cut(rs[0].Device, ";") // the device, not what was emulated
			title += ", swap device " + name
			if len(ds) > 1 {
				title = "policies compared, on several swap devices"
			}
		}
		if err := figures.RenderFigure(&b, f, 15*vg.Inch, 7*vg.Inch, title, rows...); err != nil {
			return err
		}
		if err := out.WriteFile("compare."+string(f), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
