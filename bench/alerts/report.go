package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Rows of the table besides the alerts: the detectors' own states.
const (
	hostRow     = "host detector (thrashing_state 2)"
	workloadRow = "workload detector (its cgroup_thrashing_state 2)"
)

// Names of the alerts a thrash must raise, one or the other.
const (
	hostAlert     = "ThrashscopeHostThrashing"
	workloadAlert = "ThrashscopeWorkloadThrashing"
)

// maxNamed and maxHost are the suite's bounds from the onset: the
// workload's cgroup named, and the host's state reached (the detector
// samples every second: its window and one sample's lateness).
const (
	maxNamed = 2 * time.Second
	maxHost  = 1100 * time.Millisecond
)

// notJudged are alerts about the observer itself, not about memory.
var notJudged = []string{"ThrashscopeProbeDown", "ThrashscopeDown"}

// table is a row per detector or rule, a column per scenario.
type table struct {
	head []string
	rows [][]string
}

// traceOf is a row's trace in an observation.
func traceOf(o *observation, row string) *trace {
	switch row {
	case hostRow:
		return &o.Host
	case workloadRow:
		if o.Thrash {
			return &o.Target
		}
		return &o.AnyWorkload
	}
	if o.Thrash && row == workloadAlert {
		row += namedSuffix // a thrash is caught when its own workload is named
	}
	if t := o.Alerts[row]; t != nil {
		return t
	}
	return &trace{}
}

func rowNames(rules []rule) (rows, labels []string) {
	rows, labels = []string{hostRow, workloadRow}, []string{hostRow, workloadRow}
	for _, r := range rules {
		if slices.Contains(notJudged, r.Alert) {
			continue
		}
		rows = append(rows, r.Alert)
		labels = append(labels, fmt.Sprintf("%s (%s)", r.Alert, r.Labels["severity"]))
	}
	return rows, labels
}

// cell is a thrash's time from onset to the row's first "on" (missed if
// never; not measurable when the row's rule holds longer than the
// scenario was watched past its onset), or a benign load's alarms: how
// many, and how long on in all.
func cell(o *observation, row string, hold time.Duration) string {
	t := traceOf(o, row)
	if o.Thrash {
		at, ok := t.first(o.Begin)
		if !ok {
			if watched := o.WatchedTo.Sub(o.Onset); hold > watched {
				return fmt.Sprintf("not measurable in %.0f min", watched.Minutes())
			}
			return "missed"
		}
		return fmt.Sprintf("%.1f s", at.Sub(o.Onset).Seconds())
	}
	n, on := t.within(o.Begin)
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%.1f s)", n, on.Seconds())
}

func tabulate(rules []rule, obs []*observation) table {
	rows, labels := rowNames(rules)
	t := table{head: []string{"detector or rule"}}
	// Thrashes first, then the benign loads, each in the suite's order.
	ordered := slices.Clone(obs)
	slices.SortStableFunc(ordered, func(a, b *observation) int {
		switch {
		case a.Thrash == b.Thrash:
			return 0
		case a.Thrash:
			return -1
		}
		return 1
	})
	for _, o := range ordered {
		kind := "benign"
		if o.Thrash {
			kind = "thrash"
		}
		t.head = append(t.head, fmt.Sprintf("%s: %s", kind, o.Scenario))
	}
	holds := map[string]time.Duration{}
	for _, r := range rules {
		holds[r.Alert], _ = time.ParseDuration(r.For)
	}
	for i, row := range rows {
		r := []string{labels[i]}
		for _, o := range ordered {
			r = append(r, cell(o, row, holds[row]))
		}
		t.rows = append(t.rows, r)
	}
	return t
}

func (t table) text(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.head, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

func (t table) markdown(w io.Writer) {
	fmt.Fprintln(w, "| "+strings.Join(t.head, " | ")+" |")
	fmt.Fprintln(w, "|---"+strings.Repeat("|---:", len(t.head)-1)+"|")
	for _, r := range t.rows {
		fmt.Fprintln(w, "| "+strings.Join(r, " | ")+" |")
	}
}

// judge lists what the suite's bounds do not allow (docs/metrics.md, How
// far the alerts can be trusted). A thrash: its workload named within
// maxNamed of the onset; the host's state within maxHost where the host
// detector applies; each thrash alert (the workload's; the host's where
// its detector applies) within its hold and two evaluations; nothing of
// thrashscope's on before the onset. A benign load: the kernel counted its
// floor; no warning or critical alert of thrashscope's; a detector's state
// on for no longer than its alert's hold at a time. Either: every look of
// the watch succeeded. The peers' rules are measured, not judged.
func judge(rules []rule, obs []*observation) []string {
	byName := map[string]rule{}
	for _, r := range rules {
		byName[r.Alert] = r
	}
	var out []string
	for _, o := range obs {
		if o.WatchErrors > 0 {
			out = append(out, fmt.Sprintf("%s: %d looks of the watch failed, so it cannot say what fired then: %s", o.Scenario, o.WatchErrors, strings.Join(o.Errors, "; ")))
		}
		if o.Thrash {
			out = append(out, judgeThrash(byName, o)...)
		} else {
			out = append(out, judgeBenign(byName, o)...)
		}
	}
	return out
}

func judgeThrash(rules map[string]rule, o *observation) []string {
	var out []string
	hostWide := scenarioOf(o).hostWide
	late := func(what string, t *trace, bound time.Duration) {
		if at, ok := t.first(o.Onset); !ok || at.Sub(o.Onset) > bound {
			out = append(out, fmt.Sprintf("%s: %s %s after the onset, past %s", o.Scenario, what, sinceOnset(o, t), bound))
		}
	}
	late("its workload named", &o.Target, maxNamed)
	if hostWide {
		late("the host detector in thrashing", &o.Host, maxHost)
		late(hostAlert+" fired", traceOf(o, hostAlert), rules[hostAlert].bound())
	}
	late(workloadAlert+" fired", traceOf(o, workloadAlert), rules[workloadAlert].bound())
	// Before the onset nothing of thrashscope's may be on, nor before
	// the kernel saw the group at its limit where that came first.
	first, what := o.Onset, "the onset"
	if !o.LimitMet.IsZero() && o.LimitMet.Before(first) {
		first, what = o.LimitMet, "the kernel saw its group at its limit"
	}
	early := map[string]*trace{hostRow: &o.Host, workloadRow: &o.Target}
	for name, t := range o.Alerts {
		if judged(rules, name) {
			early[name] = t
		}
	}
	for name, t := range early {
		if at, ok := t.first(o.Begin); ok && at.Before(first) {
			out = append(out, fmt.Sprintf("%s: %s on %.1f s before %s: a false alarm", o.Scenario, name, first.Sub(at).Seconds(), what))
		}
	}
	return out
}

func judgeBenign(rules map[string]rule, o *observation) []string {
	var out []string
	if err := scenarioOf(o).floor.check(o); err != nil {
		out = append(out, fmt.Sprintf("%s: %v", o.Scenario, err))
	}
	for name, t := range o.Alerts {
		if !judged(rules, name) {
			continue
		}
		if s := rules[name].Labels["severity"]; s == "warning" || s == "critical" {
			if n, on := t.within(o.Begin); n > 0 {
				out = append(out, fmt.Sprintf("%s: a benign load raised %s (%s) %d times, %.0f s in all", o.Scenario, name, s, n, on.Seconds()))
			}
		}
	}
	// A state's blip is allowed only below its alert's hold: longer, and
	// the alert would fire on it.
	for _, st := range []struct {
		row, alert string
		t          *trace
	}{{hostRow, hostAlert, &o.Host}, {workloadRow, workloadAlert, &o.AnyWorkload}} {
		hold, _ := time.ParseDuration(rules[st.alert].For)
		if longest := st.t.longest(o.Begin); longest >= hold {
			out = append(out, fmt.Sprintf("%s: a benign load held the %s on for %.1f s, not below %s's hold of %s", o.Scenario, st.row, longest.Seconds(), st.alert, hold))
		}
	}
	return out
}

// judged are thrashscope's own alerts about memory.
func judged(rules map[string]rule, name string) bool {
	_, ok := rules[name]
	return ok && strings.HasPrefix(name, "Thrashscope") && !slices.Contains(notJudged, name)
}

// sinceOnset says when a trace first came on, from the onset.
func sinceOnset(o *observation, t *trace) string {
	at, ok := t.first(o.Onset)
	if !ok {
		return "never"
	}
	return fmt.Sprintf("%.1f s", at.Sub(o.Onset).Seconds())
}

// scenarioOf is the suite's scenario an observation is of.
func scenarioOf(o *observation) scenario {
	i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == o.Scenario })
	if i < 0 {
		return scenario{name: o.Scenario}
	}
	return scenarios[i]
}

// legend lists the scenarios run, thrashes first, with what each does,
// what the kernel counted while it ran, and what a benign one must reach.
func legend(w io.Writer, obs []*observation) {
	fmt.Fprintln(w, "| scenario | what it runs | the host's counts while it ran | a benign load's floor |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, thrash := range []bool{true, false} {
		for _, o := range obs {
			s := scenarioOf(o)
			if o.Thrash != thrash || s.what == "" {
				continue
			}
			k, fl := o.Kernel, "–"
			if !o.Thrash {
				fl = s.floor.String()
			}
			peak := ""
			if o.PeakBytes > 0 {
				peak = fmt.Sprintf(", %d MiB at its peak", o.PeakBytes>>20)
			}
			fmt.Fprintf(w, "| %s | %s | %d major faults, %d swap-ins, %d swap-outs, %d MiB read%s; PSI some %.1f s, full %.1f s in %.0f s | %s |\n",
				o.Scenario, s.what, k.MajorFaults, k.SwapIns, k.SwapOuts, k.ReadKiB>>10, peak, k.PSISome.Seconds(), k.PSIFull.Seconds(), o.End.Sub(o.Begin).Seconds(), fl)
		}
	}
	fmt.Fprintln(w)
}
