package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// detection is when one signal first said "thrashing", measured from the
// onset: the moment the schedule's demand first exceeds the memory limit.
type detection struct {
	name  string
	after time.Duration // from the onset; valid when fired
	fired bool
}

// report prints the detections side by side, each as a ratio to the first.
// A signal that never fired is shown as "more than" the time watched, so
// its ratio is a lower bound.
func report(w io.Writer, ds []detection, watched time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SIGNAL\tFIRED AFTER ONSET\tVS THRASHING_STATE")
	var base time.Duration
	if len(ds) > 0 && ds[0].fired {
		base = ds[0].after
	}
	for _, d := range ds {
		after, ratio := "never", "-"
		t := watched
		if d.fired {
			after, t = d.after.Round(100*time.Millisecond).String(), d.after
		} else {
			after = "not within " + watched.Round(time.Second).String()
		}
		if base > 0 {
			ratio = fmt.Sprintf("%.1f×", t.Seconds()/base.Seconds())
			if !d.fired {
				ratio = "> " + ratio
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", d.name, after, ratio)
	}
	tw.Flush()
}

// summarize prints each signal's median over each arm's runs side by side,
// with the runs it never fired in, and returns the first arm's median of
// the first signal (thrashing_state). A run a signal never fired in counts
// as not fired: the median is over the runs it fired in.
func summarize(w io.Writer, results [][][]detection) time.Duration {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "SIGNAL, MEDIAN AFTER ONSET")
	for i := range results {
		fmt.Fprintf(tw, "\t%s", arms[i].name)
	}
	fmt.Fprintln(tw, "\tRATIO")
	var judged time.Duration
	for sig := range results[0][0] {
		fmt.Fprint(tw, results[0][0][sig].name)
		var medians []time.Duration
		for a, runs := range results {
			var fired []time.Duration
			for _, ds := range runs {
				if ds[sig].fired {
					fired = append(fired, ds[sig].after)
				}
			}
			m := medianOf(fired)
			medians = append(medians, m)
			if a == 0 && sig == 0 {
				judged = m
				if len(fired) < len(runs) {
					judged = time.Duration(1<<63 - 1)
				}
			}
			fmt.Fprintf(tw, "\t%s (%d of %d runs)", m.Round(100*time.Millisecond), len(fired), len(runs))
		}
		if len(medians) == 2 && medians[1] > 0 {
			fmt.Fprintf(tw, "\t%.2f", medians[0].Seconds()/medians[1].Seconds())
		} else {
			fmt.Fprint(tw, "\t-")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	return judged
}

func medianOf(xs []time.Duration) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
