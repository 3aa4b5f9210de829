package main

import (
	"fmt"
	"io"
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
