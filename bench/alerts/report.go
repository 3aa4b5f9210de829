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

// maxNamed and maxHost are the bounds from the onset: the
// workload's cgroup named, and the host's state reached.
const (
	maxNamed = 2 * time.Second
	maxHost  = time.Second
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
// never), or a benign load's alarms: how many, and how long on in all.
func cell(o *observation, row string) string {
	t := traceOf(o, row)
	if o.Thrash {
		at, ok := t.first(o.Begin)
		if !ok {
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
	for i, row := range rows {
		r := []string{labels[i]}
		for _, o := range ordered {
			r = append(r, cell(o, row))
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

// judge lists what the bounds do not allow: a thrash neither the
// host nor the workload alert caught, a thrash's workload named late, a
// host-wide thrash's state reached late, and a thrashscope alert above
// info on a benign load. The peers' rules are measured, not judged.
func judge(rules []rule, obs []*observation) []string {
	severity := map[string]string{}
	for _, r := range rules {
		severity[r.Alert] = r.Labels["severity"]
	}
	var out []string
	for _, o := range obs {
		if o.Thrash {
			_, host := traceOf(o, hostAlert).first(o.Begin)
			_, wl := traceOf(o, workloadAlert).first(o.Begin)
			if !host && !wl {
				out = append(out, fmt.Sprintf("%s: a thrash neither %s nor %s caught", o.Scenario, hostAlert, workloadAlert))
			}
			if at, ok := o.Target.first(o.Begin); !ok || at.Sub(o.Onset) > maxNamed {
				out = append(out, fmt.Sprintf("%s: its workload named %s after the onset, past %s", o.Scenario, cell(o, workloadRow), maxNamed))
			}
			continue
		}
		for name, t := range o.Alerts {
			if !strings.HasPrefix(name, "Thrashscope") || slices.Contains(notJudged, name) {
				continue
			}
			if s := severity[name]; s == "warning" || s == "critical" {
				if n, on := t.within(o.Begin); n > 0 {
					out = append(out, fmt.Sprintf("%s: a benign load raised %s (%s) %d times, %.0f s in all", o.Scenario, name, s, n, on.Seconds()))
				}
			}
		}
	}
	return out
}

// legend lists the scenarios run, thrashes first, with what each does and
// what the kernel counted while it ran.
func legend(w io.Writer, obs []*observation) {
	fmt.Fprintln(w, "| scenario | what it runs | the host's counts while it ran |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, thrash := range []bool{true, false} {
		for _, o := range obs {
			i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == o.Scenario })
			if o.Thrash != thrash || i < 0 {
				continue
			}
			k := o.Kernel
			fmt.Fprintf(w, "| %s | %s | %d major faults, %d swap-ins; PSI some %.1f s, full %.1f s in %.0f s |\n", o.Scenario, scenarios[i].what,
				k.MajorFaults, k.SwapIns, k.PSISome.Seconds(), k.PSIFull.Seconds(), o.End.Sub(o.Begin).Seconds())
		}
	}
	fmt.Fprintln(w)
}
