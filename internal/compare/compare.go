// Package compare runs one run spec under several thrash-control policies
// or kernel memory settings (an arm each: a policy under a set of
// settings), each repeated, interleaved (A, B, C, A, B, C, ...) so that a
// drift of the host over time does not favour one
// arm, and sums each run up: makespan, swap-ins, major faults, slowdowns,
// PSI, lateness, OOM kills, recovery, and a compressed swap's own cost. It
// writes one table (mean ± SD over the repeats, and each arm's 95 %
// confidence intervals of makespan, swap-ins and major faults) and one
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
	"github.com/thrashscope/thrashscope/internal/settings"
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
	// Settings are the sets of kernel memory settings compared, each
	// under every policy; none: the kernel's own.
	Settings []settings.Asked
	// AllowHostSettings is the operator's opt-in to host-wide ones.
	AllowHostSettings bool
	Repeats           int
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

// Arm is one thing compared: a policy under a set of settings.
type Arm struct {
	Policy   string
	Settings settings.Asked
}

func (a Arm) String() string {
	if len(a.Settings) == 0 {
		return "policy " + a.Policy
	}
	return "policy " + a.Policy + ", " + a.Settings.Label()
}

// Arms are every policy under every set of settings.
func (c Config) Arms() []Arm {
	sets := c.Settings
	if len(sets) == 0 {
		sets = []settings.Asked{nil}
	}
	var out []Arm
	for _, s := range sets {
		for _, p := range c.Policies {
			out = append(out, Arm{Policy: p, Settings: s})
		}
	}
	return out
}

// Order is the interleaved order of the runs: each arm once, repeated.
func Order[T any](arms []T, repeats int) []T {
	var out []T
	for range repeats {
		out = append(out, arms...)
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
	if len(c.Spec.Settings) > 0 && len(c.Settings) > 0 {
		return errors.New("the spec names settings: leave them out, --settings gives them")
	}
	labels := map[string]bool{}
	for _, s := range c.Settings {
		if labels[s.Label()] {
			return fmt.Errorf("--settings %s is given twice: give each set once", s.Label())
		}
		labels[s.Label()] = true
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
	order := Order(cfg.Arms(), cfg.Repeats)
	for i, arm := range order {
		spec := cfg.Spec
		spec.Policy = &arm.Policy
		if arm.Settings != nil {
			spec.Settings = arm.Settings
		}
		fmt.Fprintf(cfg.Progress, "run %d of %d: %s\n", i+1, len(order), arm)
		rec, err := standalone.Run(ctx, standalone.Config{
			Spec: spec, OutDir: cfg.OutDir, Binary: cfg.Binary, ProcfsPath: cfg.ProcfsPath,
			Progress: io.Discard, Timeout: cfg.Timeout, AllowHostSettings: cfg.AllowHostSettings,
		})
		if err != nil {
			return nil, fmt.Errorf("run %d (%s): %w", i+1, arm, err)
		}
		line := fmt.Sprintf("run %d of %d: %s %s", i+1, len(order), rec.ID, rec.State)
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
	results := resultsOf(recorded)
	return results, Write(cfg.OutDir, results)
}

// resultsOf presents each run, each named by its arm.
func resultsOf(recorded []analysis.Recorded) []Result {
	var results []Result
	for _, r := range recorded {
		results = append(results, resultOf(r))
	}
	nameArms(results)
	return results
}

// nameArms names each result's arm by what varies across the comparison:
// its policy, its settings, or both.
func nameArms(rs []Result) {
	policies, sets := map[string]bool{}, map[string]bool{}
	for _, r := range rs {
		policies[r.Policy], sets[r.Settings] = true, true
	}
	for i, r := range rs {
		switch {
		case len(sets) == 1:
			rs[i].Arm = r.Policy
		case len(policies) == 1:
			rs[i].Arm = r.Settings
		default:
			rs[i].Arm = r.Policy + ", " + r.Settings
		}
	}
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
	results := resultsOf(recorded)
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
	// Settings are the kernel memory settings the run had (their label),
	// and Arm what the comparison calls the run's arm (nameArms).
	Settings, Arm string
	// PSISomeSeconds and PSIFullSeconds are the run cgroup's memory stall
	// over the run; NaN where the kernel keeps none.
	PSISomeSeconds, PSIFullSeconds float64
	PeakPSISome                    float64 // % of an interval
	// OOMKills are the kernel's in the run cgroup.
	OOMKills float64
	// RecoverySeconds is from the demand falling under the limit to the
	// swap-ins' recovery; NaN when either did not happen.
	RecoverySeconds float64
	// Cost is the compressed swap's own (settings.CostNames).
	Cost map[string]float64
}

// resultOf presents one run's figures.
func resultOf(r analysis.Recorded) Result {
	f := analysis.Measure(r)
	rec := r.Record
	res := Result{ID: f.Summary.ID, State: f.Summary.State, Reason: rec.Reason,
		PlannedCycles: uint64(rec.Spec.Cycles) * uint64(len(rec.Consumers)),
		Totals:        f.Totals, PeakPSIFull: f.Summary.PeakPSIFull, PeakPSISome: f.Summary.PeakPSISome,
		Device: rec.DeviceLine(), Settings: rec.Spec.Settings.Label(),
		PSISomeSeconds: math.NaN(), PSIFullSeconds: math.NaN(),
		OOMKills: float64(rec.MemoryEvents["oom_kill"]), RecoverySeconds: f.Shape.RecoveryLagSeconds}
	if p := rec.Pressure; p != nil {
		res.PSISomeSeconds, res.PSIFullSeconds = p.SomeSeconds, p.FullSeconds
	}
	if rec.Settings != nil {
		res.Cost = rec.Settings.Cost
	}
	return res
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
	// reported: in the table, not among the findings a committed
	// comparison must keep (Directions).
	reported bool
}

var metrics = []metric{
	{"makespan", "s", func(r Result) float64 { return r.MakespanSeconds }, false},
	{"swap-ins", "pages", func(r Result) float64 { return r.SwapIns }, false},
	{"major faults", "", func(r Result) float64 { return r.MajorFaults }, false},
	{"mean slowdown", "×", func(r Result) float64 { return r.MeanSlowdown }, false},
	{"worst slowdown", "×", func(r Result) float64 { return r.WorstSlowdown }, false},
	{"peak PSI full", "%", func(r Result) float64 { return r.PeakPSIFull }, false},
	{"mean lateness", "s", func(r Result) float64 { return r.MeanLatenessSeconds }, false},
	{"cycles per swap-in", "", func(r Result) float64 { return r.CyclesPerSwapIn }, false},
	{"PSI some", "s", func(r Result) float64 { return r.PSISomeSeconds }, true},
	{"PSI full", "s", func(r Result) float64 { return r.PSIFullSeconds }, true},
	{"OOM kills", "", func(r Result) float64 { return r.OOMKills }, true},
	{"recovery", "s", func(r Result) float64 { return r.RecoverySeconds }, true},
}

// armWord is what the table's first column names: the policy, the
// settings, or both, whichever the comparison varies.
func armWord(rs []Result) string {
	policies, sets := map[string]bool{}, map[string]bool{}
	for _, r := range rs {
		policies[r.Policy], sets[r.Settings] = true, true
	}
	switch {
	case len(sets) == 1:
		return "policy"
	case len(policies) == 1:
		return "settings"
	}
	return "policy, settings"
}

// byArm groups results by arm, in the order arms first appear.
func byArm(rs []Result) (order []string, groups map[string][]Result) {
	groups = map[string][]Result{}
	for _, r := range rs {
		a := cmp.Or(r.Arm, r.Policy) // a result named by hand has its policy
		if _, ok := groups[a]; !ok {
			order = append(order, a)
		}
		groups[a] = append(groups[a], r)
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
	fmt.Fprintf(&b, "| %s |", armWord(rs))
	for _, m := range metrics {
		if m.unit != "" {
			fmt.Fprintf(&b, " %s (%s) |", m.name, m.unit)
		} else {
			fmt.Fprintf(&b, " %s |", m.name)
		}
	}
	b.WriteString(" runs |\n|---|")
	b.WriteString(strings.Repeat("---:|", len(metrics)+1) + "\n")
	order, groups := byArm(rs)
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
	intervals(&b, order, groups)
	costTable(&b, order, groups)
	consumerTable(&b, order, groups)
	unfinished(&b, rs)
	return b.String()
}

// intervals gives each arm's 95 % confidence interval of the mean of the
// measures a comparison is read by, over its repeats.
func intervals(b *strings.Builder, order []string, groups map[string][]Result) {
	first := true
	for _, a := range order {
		var parts []string
		for _, m := range metrics[:3] {
			vs := values(groups[a], m)
			if h := ci95(vs); !math.IsNaN(h) {
				mean, _ := stats.MeanSD(vs)
				parts = append(parts, fmt.Sprintf("%s %s to %s%s", m.name, num(mean-h), num(mean+h), strings.TrimRight(" "+m.unit, " ")))
			}
		}
		if len(parts) == 0 {
			continue
		}
		if first {
			b.WriteString("\n95 % confidence intervals of the means (Student's t over the repeats):\n")
			first = false
		}
		fmt.Fprintf(b, "- %s: %s\n", a, strings.Join(parts, "; "))
	}
}

// costTable adds what a compressed swap held and did, for arms whose
// runs recorded it (settings.CostNames).
func costTable(b *strings.Builder, order []string, groups map[string][]Result) {
	var names []string
	for _, n := range settings.CostNames {
		for _, rs := range groups {
			if slices.ContainsFunc(rs, func(r Result) bool { _, ok := r.Cost[n]; return ok }) && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		return
	}
	fmt.Fprintf(b, "\n| %s | %s |\n|---|%s\n", armWord(flatten(groups)), strings.Join(names, " | "), strings.Repeat("---:|", len(names)))
	for _, a := range order {
		fmt.Fprintf(b, "| %s |", a)
		for _, n := range names {
			var vs []float64
			for _, r := range groups[a] {
				if v, ok := r.Cost[n]; ok {
					vs = append(vs, v)
				}
			}
			b.WriteString(" " + cell(vs) + " |")
		}
		b.WriteString("\n")
	}
}

func flatten(groups map[string][]Result) []Result {
	var out []Result
	for _, rs := range groups {
		out = append(out, rs...)
	}
	return out
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
		fmt.Fprintf(b, "- %s (%s): %s, %s", r.ID, cmp.Or(r.Arm, r.Policy), r.State, cmp.Or(r.Reason, "no reason recorded"))
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
	if len(vs) == 1 {
		return num(mean)
	}
	return num(mean) + " ± " + num(sd)
}

func num(v float64) string {
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

// Charts are the figure's panels: each measure per repeat, one curve a
// policy.
func Charts(rs []Result) []figures.Chart {
	order, groups := byArm(rs)
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
		title := map[string]string{"policy": "policies", "settings": "settings"}[armWord(rs)]
		title = cmp.Or(title, "policies and settings") + " compared"
		if ds := devices(rs); len(ds) > 1 || ds[0] != "the host's own swap" {
			name, _, _ := strings.Cut(rs[0].Device, ";") // the device, not what was emulated
			title += ", swap device " + name
			if len(ds) > 1 {
				title += " and others"
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
