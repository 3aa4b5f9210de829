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
//	go run ./bench/diagnosis --json all.json; go run ./bench/diagnosis --from all.json --markdown   # the table of docs/diagnoses.md
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/thrashscope/thrashscope/bench/internal/stack"
	"github.com/thrashscope/thrashscope/bench/internal/zram"
	"github.com/thrashscope/thrashscope/internal/cgroup"
)

type options struct {
	observer, prometheus string
	peer                 string
	log                  func(string, ...any)
}

func main() {
	beNeighbour()
	var o options
	flag.StringVar(&o.observer, "observer", "bin/observer", "the observer binary (bin/loadgen beside it)")
	flag.StringVar(&o.prometheus, "prometheus", "prometheus", "the Prometheus server binary the bench's stack starts beside the observer")
	only := flag.String("only", "", "comma-separated scenarios to run (default all): "+strings.Join(names(), ","))
	jsonOut := flag.String("json", "", "also write every result to this file")
	markdown := flag.Bool("markdown", false, "print the table as Markdown")
	from := flag.String("from", "", "judge and print the results of an earlier --json instead of running")
	flag.StringVar(&o.peer, "peer", "", "size each group with a peer's rule instead of the diagnosis's first remedy, and show where it ended the thrash: senpai (a re-implementation of its published rule)")
	flag.Parse()
	if o.peer != "" && o.peer != "senpai" {
		fmt.Fprintf(os.Stderr, "diagnosis: --peer=%q: the peer the suite runs is senpai (or none)\n", o.peer)
		os.Exit(2)
	}
	o.log = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := o.results(ctx, *only, *from)
	if err != nil {
		fmt.Fprintln(os.Stderr, "diagnosis:", err)
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

// results runs the scenarios named in only (all if empty), or reads an
// earlier run's from the JSON file from.
func (o options) results(ctx context.Context, only, from string) ([]*result, error) {
	var results []*result
	if from != "" {
		b, err := os.ReadFile(from)
		if err == nil {
			err = json.Unmarshal(b, &results)
		}
		return results, err
	}
	for _, s := range scenarios {
		if (only != "" || s.named) && !slices.Contains(strings.Split(only, ","), s.name) {
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
		return nil, fmt.Errorf("no scenario named in --only=%s; there are %s", only, strings.Join(names(), ", "))
	}
	return results, nil
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
func (o options) run(ctx context.Context, s scenario) (res *result, err error) {
	// Last, once the run and the neighbour are stopped: a compressed swap
	// tried and not given back under the scenario's pressure.
	defer func() { err = errors.Join(err, zram.GiveBackAll()) }()
	tmp, err := os.MkdirTemp("/var/tmp", "thrashscope-diagnosis-")
	if err != nil {
		return &result{Scenario: s.name}, err
	}
	defer os.RemoveAll(tmp)
	depth, err := runDepth()
	if err != nil {
		return &result{Scenario: s.name}, err
	}
	args := []string{fmt.Sprintf("--cgroup.depth=%d", depth)}
	var sh *sharedLimit
	if s.shared > 0 {
		if sh, err = makeShared(s); err != nil {
			return &result{Scenario: s.name}, err
		}
		defer sh.remove()
		args = append(args, "--cgroup.parent="+sh.parent.Path)
	}
	st, err := stack.Start(ctx, tmp, o.observer, o.prometheus, nil, args...)
	defer st.Stop()
	if err != nil {
		return &result{Scenario: s.name}, err
	}
	return induce(ctx, st, s, sh, o.peer, o.log)
}

// sharedLimit is a shared-limit scenario's parent group, limited, and the
// neighbour's group beneath it, both made by the suite.
type sharedLimit struct {
	parent, group *cgroup.Cgroup
	guard         *cgroup.OOMGuard
	size          int64
	n             *neighbour
}

// makeShared makes the parent beneath this process's own memory group,
// with the scenario's shared limit, and the neighbour's group under it.
func makeShared(s scenario) (*sharedLimit, error) {
	own, err := cgroup.Own("/proc")
	if err != nil {
		return nil, err
	}
	parent, err := own.Create("bench-shared", cgroup.Limits{MemoryBytes: s.shared})
	if err != nil {
		return nil, err
	}
	// The parent's limit is what the consumers and the neighbour meet:
	// without the guard a run's has, the kernel's OOM killer took the
	// neighbour there while it grew, its reclaim waiting on a busy swap
	// disk.
	guard, err := parent.GuardOOM(s.shared)
	if err != nil {
		_ = parent.Destroy(context.Background())
		return nil, err
	}
	group, err := parent.Child("bench-neighbour")
	if err != nil {
		guard.Close()
		_ = parent.Destroy(context.Background())
		return nil, err
	}
	return &sharedLimit{parent: parent, group: group, guard: guard, size: s.neighbour}, nil
}

// charge is the neighbour's group's charge, as the kernel counts it.
func (sh *sharedLimit) charge() (int64, error) {
	file := "memory.usage_in_bytes"
	if sh.group.V2 {
		file = "memory.current"
	}
	b, err := os.ReadFile(filepath.Join(sh.group.Path, file))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// start starts the neighbour growing.
func (sh *sharedLimit) start() error {
	var err error
	sh.n, err = startNeighbour(sh.group, sh.size)
	return err
}

// remove stops the neighbour and removes both groups.
func (sh *sharedLimit) remove() {
	sh.n.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := sh.group.Destroy(ctx)
	sh.guard.Close()
	if err := errors.Join(err, sh.parent.Destroy(ctx)); err != nil {
		fmt.Fprintln(os.Stderr, "diagnosis:", err)
	}
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
		return []string{r.Scenario, "failed: " + r.Err, "", "", "", ""}[:len(r.header())]
	}
	if r.Peer != "" {
		return r.peerRow()
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
		r.shortfallCell(),
		r.remedyCell(mark),
		ended,
		strings.Join(useless, ", "),
	}
}

// shortfallCell is the truth and the diagnosis's median over its looks.
func (r *result) shortfallCell() string {
	if r.Shortfall == 0 {
		return fmt.Sprintf("none, diagnosed %d MiB (%.0f %% of the limit, %d looks)", r.GotShortfall>>20, 100*r.shortfallOff(), r.Looks)
	}
	return fmt.Sprintf("%d MiB, diagnosed %d MiB (%+.0f %%, %d looks)", r.Shortfall>>20, r.GotShortfall>>20, 100*r.shortfallOff(), r.Looks)
}

var (
	header     = []string{"scenario", "binding limit (truth)", "shortfall: truth, diagnosed", "first remedy, applied", "the thrash", "ruled out"}
	peerHeader = []string{"scenario", "shortfall (truth)", "peer", "its limit when the thrash ended", "the thrash", "its limit at the end"}
)

func (r *result) header() []string {
	if r.Peer != "" {
		return peerHeader
	}
	return header
}

// peerRow is what the peer's rule did with the run's own limit, beside the
// truth: what the limit had to grow by.
func (r *result) peerRow() []string {
	ended, at := "did not end", "–"
	if r.EndedAfter > 0 {
		ended = fmt.Sprintf("ended %.1f s after it started", r.EndedAfter.Seconds())
		if !r.StayedEnded {
			ended += ", came back"
		}
		at = fmt.Sprintf("%d MiB (%+d MiB)", r.PeerEndedBytes>>20, (r.PeerEndedBytes-r.PeerFromBytes)>>20)
	}
	return []string{r.Scenario, fmt.Sprintf("%d MiB over %d MiB", r.Shortfall>>20, r.PeerFromBytes>>20), r.Peer, at, ended,
		fmt.Sprintf("%d MiB (%+d MiB)", r.PeerFinalBytes>>20, (r.PeerFinalBytes-r.PeerFromBytes)>>20)}
}

func writeText(w io.Writer, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(results[0].header(), "\t"))
	for _, r := range results {
		fmt.Fprintln(tw, strings.Join(r.row(), "\t"))
	}
	_ = tw.Flush()
}

// remedyCell is the first remedy: the size it sets, or the culprit it
// names beside the truth's.
func (r *result) remedyCell(mark func(bool) string) string {
	switch {
	case r.GotRemedy.Bytes > 0:
		return fmt.Sprintf("%s to %d MiB", r.GotRemedy.Action, r.GotRemedy.Bytes>>20)
	case r.GotRemedy.Target != "" && r.Culprit != "":
		return fmt.Sprintf("%s %s (%s)", r.GotRemedy.Action, path.Base(r.GotRemedy.Target), mark(strings.HasSuffix(r.GotRemedy.Target, r.Culprit)))
	}
	return string(r.GotRemedy.Action)
}

func writeMarkdown(w io.Writer, results []*result) {
	h := results[0].header()
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
	for _, r := range results {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r.row(), " | "))
	}
}
