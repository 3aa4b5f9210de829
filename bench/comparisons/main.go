// Command comparisons is the full form of the check that each comparison
// the docs report (docs/policies/<name>/) keeps its findings at this
// commit: each comparison runs again with its committed policies and
// repeats, interleaved, and each finding its committed runs hold beyond
// their spread (compare.Directions) must lie the same way. It prints a
// line per finding, the committed ratio beside today's, and fails when one
// turned around. The comparisons on an emulated swap device take up to
// hours; --only picks some. make test runs the short form (each policy
// once, the host's own swap only). Invoked by `make bench`; needs root
// and swap, and no other thrash on the host.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/thrashscope/thrashscope/internal/compare"
)

func main() {
	docs := flag.String("docs", "docs/policies", "the committed comparisons")
	only := flag.String("only", "", "run only these comparisons, their directories under --docs, comma-separated (e.g. syn8-1.1,hdd-2013/e4); all by default")
	out := flag.String("out", "", "directory for the runs (default: a temporary one, removed after)")
	loadgen := flag.String("loadgen", "bin/loadgen", "the consumers' binary")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *docs, *only, *out, *loadgen); err != nil {
		fmt.Fprintln(os.Stderr, "comparisons:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, docs, only, out, loadgen string) error {
	dirs, err := compare.CommittedUnder(docs)
	if err != nil {
		return err
	}
	if out == "" {
		if out, err = os.MkdirTemp("", "thrashscope-comparisons-"); err != nil {
			return err
		}
		defer os.RemoveAll(out)
	}
	var turned []string
	for _, dir := range dirs {
		name, _ := filepath.Rel(docs, dir)
		if only != "" && !slices.Contains(strings.Split(only, ","), name) {
			continue
		}
		c, err := compare.LoadCommitted(dir)
		if err != nil {
			return err
		}
		ds := compare.Directions(c.Results)
		if len(ds) == 0 {
			fmt.Printf("%s: no finding beyond its %d runs' spread: nothing to keep\n\n", name, len(c.Results))
			continue
		}
		fmt.Printf("%s: %v, %d repeats (the longest committed run took %s)\n", name, c.Policies, c.Repeats, c.Longest.Round(1e9))
		rs, err := c.Rerun(ctx, c.Repeats, loadgen, filepath.Join(out, name), os.Stderr)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		problems := compare.Keeps(ds, rs)
		for _, d := range ds {
			fmt.Printf("  %s: ×%.2f now\n", d, d.RatioIn(rs))
		}
		for _, p := range problems {
			turned = append(turned, name+": "+p)
		}
		fmt.Println()
	}
	if len(turned) > 0 {
		return fmt.Errorf("%d findings turned around:\n  %s", len(turned), strings.Join(turned, "\n  "))
	}
	return nil
}
