package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Targets the observer is held to. Breaking one is printed as FAIL; the
// benchmark still exits 0, since it measures rather than tests.
const (
	maxSlowdownPercent    = 3.0
	maxObserverCPUPercent = 1.0
	maxObserverRSSMiB     = 50.0
)

// report is everything one run measured; it is printed as a table and
// written as JSON with --json.
type report struct {
	Config    reportConfig     `json:"config"`
	Idle      *selfCostFigures `json:"idle_observer,omitempty"`
	Workloads []workloadReport `json:"workloads"`
	Targets   []target         `json:"targets"`
}

type reportConfig struct {
	Observer        string  `json:"observer,omitempty"`
	Rounds          int     `json:"rounds"`
	DurationSeconds float64 `json:"duration_seconds"`
	WarmupSeconds   float64 `json:"warmup_seconds"`
	BaselineOnly    bool    `json:"baseline_only"`
	CPUs            int     `json:"cpus"`
	Kernel          string  `json:"kernel"`
	Started         string  `json:"started"`
}

// workloadReport is one workload's rounds and what they add up to. The
// observed fields are absent with --baseline-only.
type workloadReport struct {
	Name        string           `json:"name"`
	BaselineOps []float64        `json:"baseline_ops_per_sec"`
	ObservedOps []float64        `json:"observed_ops_per_sec,omitempty"`
	Baseline    summary          `json:"baseline"`
	Observed    *summary         `json:"observed,omitempty"`
	Comparison  *comparison      `json:"comparison,omitempty"`
	Observer    *selfCostFigures `json:"observer,omitempty"`
}

func newWorkloadReport(name string, baseline, observed []float64, cost selfCost, ticksPerSecond uint64) workloadReport {
	w := workloadReport{
		Name:        name,
		BaselineOps: baseline,
		Baseline:    summarize(baseline),
	}
	if len(observed) == 0 {
		return w
	}
	obs := summarize(observed)
	cmp := compare(w.Baseline.Median, obs.Median)
	fig := cost.figures(ticksPerSecond)
	w.ObservedOps, w.Observed, w.Comparison, w.Observer = observed, &obs, &cmp, &fig
	return w
}

// target is one pass/fail line.
type target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Limit float64 `json:"limit"`
	Unit  string  `json:"unit"`
	Pass  bool    `json:"pass"`
}

// evaluateTargets checks each workload's slowdown, the observer's CPU in
// every phase, and its peak resident set over all of them.
func evaluateTargets(r *report) []target {
	var ts []target
	for _, w := range r.Workloads {
		if w.Comparison == nil {
			continue
		}
		s := w.Comparison.SlowdownPercent
		ts = append(ts, target{Name: w.Name + " slowdown", Value: s, Limit: maxSlowdownPercent, Unit: "%", Pass: s <= maxSlowdownPercent})
	}
	var peakRSS float64
	var haveCost bool
	cpu := func(name string, f *selfCostFigures) {
		if f == nil {
			return
		}
		haveCost = true
		peakRSS = max(peakRSS, f.PeakRSSMiB, f.RSSMiB)
		ts = append(ts, target{Name: "observer CPU " + name, Value: f.CPUPercent, Limit: maxObserverCPUPercent, Unit: "% of one core", Pass: f.CPUPercent < maxObserverCPUPercent})
	}
	cpu("idle", r.Idle)
	for _, w := range r.Workloads {
		cpu("under "+w.Name, w.Observer)
	}
	if haveCost {
		ts = append(ts, target{Name: "observer peak RSS", Value: peakRSS, Limit: maxObserverRSSMiB, Unit: "MiB", Pass: peakRSS < maxObserverRSSMiB})
	}
	return ts
}

// writeTable prints the report as plain text that pastes into a note.
func writeTable(out io.Writer, r *report) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "workload\tbaseline ops/s\tobserved ops/s\tratio\tslowdown\tspread(base)\tspread(obs)")
	for _, w := range r.Workloads {
		obs, ratio, slow, spreadObs := "-", "-", "-", "-"
		if w.Observed != nil {
			obs = fmt.Sprintf("%.0f", w.Observed.Median)
			ratio = fmt.Sprintf("%.3f", w.Comparison.Ratio)
			slow = fmt.Sprintf("%.1f%%", w.Comparison.SlowdownPercent)
			spreadObs = spread(*w.Observed)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\n", w.Name, w.Baseline.Median, obs, ratio, slow, spread(w.Baseline), spreadObs)
	}
	tw.Flush()
	fmt.Fprintf(&b, "(medians of %d rounds of %gs; spread is min..max of the rounds and its width as %% of the median)\n",
		r.Config.Rounds, r.Config.DurationSeconds)

	if costs := selfCostRows(r); len(costs) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
		fmt.Fprintln(tw, "observer self-cost\tCPU, % of one core\tRSS MiB\tpeak RSS MiB")
		for _, c := range costs {
			fmt.Fprintf(tw, "%s\t%.2f%%\t%.1f\t%.1f\n", c.name, c.f.CPUPercent, c.f.RSSMiB, c.f.PeakRSSMiB)
		}
		tw.Flush()
		b.WriteString("(CPU is utime+stime over the measured windows; RSS the largest VmRSS seen in them; peak RSS is VmHWM, start-up included)\n")
	}

	if len(r.Targets) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
		fmt.Fprintln(tw, "target\tvalue\tlimit\tverdict")
		failed := 0
		for _, t := range r.Targets {
			verdict := "PASS"
			if !t.Pass {
				verdict = "FAIL"
				failed++
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, formatValue(t.Value, t.Unit), limitText(t), verdict)
		}
		tw.Flush()
		if failed > 0 {
			fmt.Fprintf(&b, "overall: FAIL (%d of %d targets missed)\n", failed, len(r.Targets))
		} else {
			fmt.Fprintf(&b, "overall: PASS (%d targets met)\n", len(r.Targets))
		}
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// spread renders min..max of the rounds and the width of that range.
func spread(s summary) string {
	return fmt.Sprintf("%.0f..%.0f (%.1f%%)", s.Min, s.Max, s.spreadPercent())
}

type selfCostRow struct {
	name string
	f    *selfCostFigures
}

func selfCostRows(r *report) []selfCostRow {
	var rows []selfCostRow
	if r.Idle != nil {
		rows = append(rows, selfCostRow{"idle", r.Idle})
	}
	for _, w := range r.Workloads {
		if w.Observer != nil {
			rows = append(rows, selfCostRow{"under " + w.Name, w.Observer})
		}
	}
	return rows
}

func formatValue(v float64, unit string) string {
	switch unit {
	case "%":
		return fmt.Sprintf("%.1f%%", v)
	case "% of one core":
		return fmt.Sprintf("%.2f%%", v)
	default:
		return fmt.Sprintf("%.1f %s", v, unit)
	}
}

// limitText is the limit as written in the targets: a slowdown exactly at
// its limit passes, the observer's figures must stay under theirs.
func limitText(t target) string {
	switch t.Unit {
	case "%":
		return fmt.Sprintf("<= %g%%", t.Limit)
	case "% of one core":
		return fmt.Sprintf("< %g%%", t.Limit)
	default:
		return fmt.Sprintf("< %g %s", t.Limit, t.Unit)
	}
}
