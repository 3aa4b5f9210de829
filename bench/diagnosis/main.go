// Command diagnosis proves thrashscope's diagnoses on a labelled suite: each
// scenario a real thrash induced through bin/observer's API, with a known
// truth (the limit that binds, how much memory it lacks, the remedy that
// ends it). For each it reads GET /api/v1/diagnoses while every consumer is
// active, holds the binding limit and the shortfall to the truth, then
// applies the diagnosis's first remedy and watches whether the workload
// leaves thrashing within 10 s and stays out while the demand is still
// there.
//
//	go run ./bench/diagnosis --observer bin/observer            # root, swap; about 2 minutes a scenario
//	go run ./bench/diagnosis --markdown                         # the table of docs/diagnoses.md
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/thrashscope/thrashscope/bench/internal/stack"
	"github.com/thrashscope/thrashscope/internal/cgroup"
)

type options struct {
	observer, prometheus string
	log                  func(string, ...any)
}

func main() {
	var o options
	flag.StringVar(&o.observer, "observer", "bin/observer", "the observer binary (bin/loadgen beside it)")
	flag.StringVar(&o.prometheus, "prometheus", "prometheus", "the Prometheus server binary the bench's stack starts beside the observer")
	only := flag.String("only", "", "comma-separated scenarios to run (default all): "+strings.Join(names(), ","))
	jsonOut := flag.String("json", "", "also write every result to this file")
	markdown := flag.Bool("markdown", false, "print the table as Markdown")
	flag.Parse()
	o.log = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var results []*result
	for _, s := range scenarios {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), s.name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		o.log("== %s: %s", s.name, s.what)
		r, err := o.run(ctx, s)
		if err != nil {
			r.Err = err.Error()
		}
		results = append(results, r)
	}
	if len(results) == 0 {
		fmt.Fprintf(os.Stderr, "diagnosis: no scenario named in --only=%s; there are %s\n", *only, strings.Join(names(), ", "))
		os.Exit(2)
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "diagnosis:", err)
		}
	}
	if *markdown {
		writeMarkdown(os.Stdout, results)
	} else {
		writeText(os.Stdout, results)
	}
	var problems []string
	for _, r := range results {
		problems = append(problems, r.problems()...)
	}
	if len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "\ndiagnosis: "+strings.Join(problems, "\ndiagnosis: "))
		os.Exit(1)
	}
}

func names() []string {
	var n []string
	for _, s := range scenarios {
		n = append(n, s.name)
	}
	return n
}

// run runs one scenario under a fresh observer, its workloads named at a
// run's cgroup (--cgroup.depth), so that a run is one workload.
func (o options) run(ctx context.Context, s scenario) (*result, error) {
	tmp, err := os.MkdirTemp("/var/tmp", "thrashscope-diagnosis-")
	if err != nil {
		return &result{Scenario: s.name}, err
	}
	defer os.RemoveAll(tmp)
	depth, err := runDepth()
	if err != nil {
		return &result{Scenario: s.name}, err
	}
	st, err := stack.Start(ctx, tmp, o.observer, o.prometheus, nil, fmt.Sprintf("--cgroup.depth=%d", depth))
	defer st.Stop()
	if err != nil {
		return &result{Scenario: s.name}, err
	}
	return induce(ctx, st, s, o.log)
}

// runDepth is the depth of a run's cgroup beneath this process's own in the
// unified hierarchy, where the observer the bench starts makes its runs.
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

// row is a result as the table shows it.
func (r *result) row() []string {
	if r.Err != "" {
		return []string{r.Scenario, "failed: " + r.Err, "", "", "", ""}
	}
	mark := func(ok bool) string {
		if ok {
			return "right"
		}
		return "**wrong**"
	}
	ended := "did not end"
	if r.EndedAfter > 0 {
		ended = fmt.Sprintf("ended %.1f s after", r.EndedAfter.Seconds())
		if !r.StayedEnded {
			ended += ", came back"
		} else {
			ended += ", stayed ended"
		}
	}
	var useless []string
	for _, u := range r.Useless {
		what := string(u.Action)
		for _, t := range r.Tried {
			if t.Action == u.Action && t.EndedIt {
				what += fmt.Sprintf(" (tried %.0f s: **it ended the thrash**)", uselessFor.Seconds())
			} else if t.Action == u.Action {
				what += fmt.Sprintf(" (tried %.0f s: still thrashing)", uselessFor.Seconds())
			}
		}
		useless = append(useless, what)
	}
	return []string{
		r.Scenario,
		fmt.Sprintf("%s (%s)", r.Binding, mark(r.BindingRight)),
		fmt.Sprintf("%d MiB, diagnosed %d MiB (%+.0f %%, %d looks)", r.Shortfall>>20, r.GotShortfall>>20, 100*r.shortfallOff(), r.Looks),
		fmt.Sprintf("%s to %d MiB", r.GotRemedy.Action, r.GotRemedy.Bytes>>20),
		ended,
		strings.Join(useless, ", "),
	}
}

var header = []string{"scenario", "binding limit (truth)", "shortfall: truth, diagnosed", "first remedy, applied", "the thrash", "ruled out"}

func writeText(w io.Writer, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range results {
		fmt.Fprintln(tw, strings.Join(r.row(), "\t"))
	}
	_ = tw.Flush()
}

func writeMarkdown(w io.Writer, results []*result) {
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
	for _, r := range results {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r.row(), " | "))
	}
}
