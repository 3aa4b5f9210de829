package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/thrashscope/thrashscope/internal/analysis"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/stats"
	"github.com/thrashscope/thrashscope/internal/store"
)

// SummaryText is summary.txt: each run's figures, then, for several runs,
// their mean ± SD, then how each figure is defined.
func SummaryText(runs []analysis.Recorded, sums []analysis.Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "thrashscope run report: %d run(s)\n", len(runs))
	for i, s := range sums {
		b.WriteString("\n")
		runText(&b, runs[i], s)
	}
	if len(sums) > 1 {
		b.WriteString("\n")
		acrossText(&b, sums)
	}
	// Runs of one preset at several scales: each scale's runs on their own,
	// with the rates per MiB of limit that should match across scales.
	if scales := byScale(sums); len(scales) > 1 {
		for _, g := range scales {
			fmt.Fprintf(&b, "\nat scale %g: ", g[0].Spec.Scale)
			acrossText(&b, g)
		}
	}
	b.WriteString("\n")
	b.WriteString(definitions)
	return b.String()
}

// line writes one "label  value" line of a block.
func line(b *strings.Builder, label, format string, args ...any) {
	fmt.Fprintf(b, "  %-28s %s\n", label, fmt.Sprintf(format, args...))
}

func runText(b *strings.Builder, r analysis.Recorded, s analysis.Summary) {
	fmt.Fprintf(b, "run %s\n", s.ID)
	line(b, "spec", "%s", describe(r.Record))
	if d := r.Record.DeviceLine(); d != "" {
		line(b, "swap device", "%s", d)
	}
	state := s.State
	if r.Record.Reason != "" {
		state += ": " + r.Record.Reason
	}
	line(b, "outcome", "%s after %.1f s", state, s.DurationSeconds)
	line(b, "started", "%s", r.Record.StartedAt.UTC().Format("2006-01-02 15:04:05 UTC"))
	if s.HasPlannedOverload {
		line(b, "planned demand > limit", "at %.1f s", s.PlannedOverload)
	}
	episodeText(b, s)
	line(b, "peak swap-in", "%.0f pages/s at %.1f s", s.PeakSwapIn, s.PeakSwapInAt)
	line(b, "peak swap-out", "%.0f pages/s", s.PeakSwapOut)
	line(b, "peak PSI memory some / full", "%.1f %% / %.1f %%", s.PeakPSISome, s.PeakPSIFull)
	if s.PeakConsumerStall >= 0 {
		line(b, "peak consumer stall", "%.1f %% of one CPU", s.PeakConsumerStall)
	} else {
		line(b, "peak consumer stall", "unknown (no BPF stall probe: a loadgen run or --probes=procfs)")
	}
	l := s.Lateness
	if l.Finished > 0 && s.Spec.Traits().Scheduled {
		line(b, "consumer lateness", "max %.2f s (%s), mean %.2f s; %d of %d late (more than %.1f s past t_f)",
			l.Max, run.ConsumerName(l.MaxIndex), l.Mean, l.Late, l.Finished, l.LateCutoff)
	}
	var oom []string
	for _, i := range s.OOMKilled {
		oom = append(oom, run.ConsumerName(i))
	}
	if len(oom) == 0 {
		line(b, "consumers OOM-killed", "0 of %d", s.Consumers)
	} else {
		line(b, "consumers OOM-killed", "%d of %d (%s)", len(oom), s.Consumers, strings.Join(oom, ", "))
	}
	if r.Processes == nil {
		line(b, "per-process figure", "none: the run has no processes.csv (recorded by an older thrashscope)")
	}
	if len(r.Fill) > 0 {
		fillText(b, r.Fill)
	}
}

// episodeText writes the run's thrashing episode: its onset and recovery,
// with the other source's beside them.
func episodeText(b *strings.Builder, s analysis.Summary) {
	p := s.Primary()
	switch {
	case p == nil:
		line(b, "thrashing onset", "none (no detector transition to thrashing, and swap-in never held %d samples above its threshold)", analysis.SustainSamples)
	default:
		line(b, "thrashing onset", "%.1f s (%s)%s", p.Onset, p.Source, other(s, func(e *analysis.Episode) string { return fmt.Sprintf("%.1f s", e.Onset) }))
		rec := "not before the run ended"
		if p.Recovered {
			rec = fmt.Sprintf("%.1f s (%s), %.1f s after onset", p.Recovery, p.Source, p.Recovery-p.Onset)
		}
		line(b, "recovery", "%s%s", rec, other(s, func(e *analysis.Episode) string {
			if !e.Recovered {
				return "none"
			}
			return fmt.Sprintf("%.1f s", e.Recovery)
		}))
		if s.SwapIn != nil {
			line(b, "swap-in threshold", "%.0f pages/s", s.SwapIn.Threshold)
		}
	}
}

// other is the other source's reading of an episode, in brackets, when both
// sources have one.
func other(s analysis.Summary, f func(*analysis.Episode) string) string {
	if s.Detector == nil || s.SwapIn == nil {
		return ""
	}
	return fmt.Sprintf("; swap-in rule: %s", f(s.SwapIn))
}

func fillText(b *strings.Builder, rows []store.FillRow) {
	b.WriteString("  fill time per chunk (mean ± SD over the repeats):\n")
	fmt.Fprintf(b, "    %5s  %12s  %18s  %12s  %12s\n", "chunk", "allocated", "fill time", "free memory", "free swap")
	for _, f := range rows {
		fmt.Fprintf(b, "    %5d  %8.0f MiB  %7.3f ± %5.3f s  %8.0f MiB  %8.0f MiB\n",
			f.Chunk, float64(f.AllocatedBytes)/mib, f.MeanSeconds, f.SDSeconds, f.MemoryFreeBytes/mib, f.SwapFreeBytes/mib)
	}
}

// acrossText is the runs' mean ± SD of each figure, over the runs that have it.
func acrossText(b *strings.Builder, sums []analysis.Summary) {
	fmt.Fprintf(b, "across %d runs (mean ± SD, over the runs that have the figure)\n", len(sums))
	stat := func(label, unit string, prec int, get func(analysis.Summary) (float64, bool)) {
		var xs []float64
		for _, s := range sums {
			if v, ok := get(s); ok {
				xs = append(xs, v)
			}
		}
		if len(xs) == 0 {
			line(b, label, "none")
			return
		}
		m, sd := stats.MeanSD(xs)
		line(b, label, "%.*f ± %.*f%s (n=%d)", prec, m, prec, sd, unit, len(xs))
	}
	stat("thrashing onset", " s", 1, func(s analysis.Summary) (float64, bool) {
		if p := s.Primary(); p != nil {
			return p.Onset, true
		}
		return 0, false
	})
	stat("recovery", " s", 1, func(s analysis.Summary) (float64, bool) {
		if p := s.Primary(); p != nil && p.Recovered {
			return p.Recovery, true
		}
		return 0, false
	})
	stat("peak swap-in", " pages/s", 0, func(s analysis.Summary) (float64, bool) { return s.PeakSwapIn, true })
	stat("peak swap-in per MiB of limit", " pages/s", 2, func(s analysis.Summary) (float64, bool) {
		return s.PeakSwapIn / (float64(s.Spec.MemoryLimitBytes) / mib), s.Spec.MemoryLimitBytes > 0
	})
	stat("thrash length", " s", 1, func(s analysis.Summary) (float64, bool) {
		if p := s.Primary(); p != nil && p.Recovered {
			return p.Recovery - p.Onset, true
		}
		return 0, false
	})
	stat("peak swap-out", " pages/s", 0, func(s analysis.Summary) (float64, bool) { return s.PeakSwapOut, true })
	stat("peak PSI memory full", " %", 1, func(s analysis.Summary) (float64, bool) { return s.PeakPSIFull, true })
	stat("peak consumer stall", " % of one CPU", 1, func(s analysis.Summary) (float64, bool) { return s.PeakConsumerStall, s.PeakConsumerStall >= 0 })
	stat("max consumer lateness", " s", 2, func(s analysis.Summary) (float64, bool) { return s.Lateness.Max, s.Lateness.Finished > 0 })
	stat("late consumers", "", 1, func(s analysis.Summary) (float64, bool) { return float64(s.Lateness.Late), s.Lateness.Finished > 0 })
	stat("consumers OOM-killed", "", 1, func(s analysis.Summary) (float64, bool) { return float64(len(s.OOMKilled)), true })
}

var definitions = fmt.Sprintf(`definitions
  Times are seconds since the run started; a sample's time is the end of the
  interval its rates cover (samples.csv elapsed_seconds).
  thrashing onset, recovery (detector): the first transition of the thrash
    detector into thrashing recorded in the run, and its last transition out
    of thrashing (to monitoring or normal). Only the observer records them.
  thrashing onset, recovery (swap-in rule), used when the detector recorded
    none: the threshold is %.0f %% of the run's peak swap-in rate, at least
    %d pages/s (on an emulated swap device, at least a tenth of its read
    I/Os a second when that is lower). Onset is the first sample of the
    first %d or more samples in a row at or above it; recovery the first
    sample after the last such stretch that begins %d samples in a row
    below it.
  planned demand > limit: when the schedule's active consumers × S first
    exceed the cgroup's limit.
  peak PSI memory some / full: the highest share of a sample interval in which
    some / all non-idle tasks stalled on memory (/proc/pressure/memory).
  peak consumer stall: the consumers' summed memory-stall time in an interval,
    as a share of one CPU (can pass 100 %%).
  consumer lateness: how long past its finish time t_f each consumer ended,
    over the consumers that started and were not OOM-killed; late means more
    than t_s + %.0f s past t_f (one cycle's sleep, plus slack).
  across runs: mean ± sample standard deviation (n-1).
`, 100*analysis.ThresholdShare, analysis.MinSwapInThreshold, analysis.SustainSamples, analysis.SustainSamples, analysis.LateSlack.Seconds())

// byScale groups summaries by their spec's scale, in the order first seen.
func byScale(sums []analysis.Summary) [][]analysis.Summary {
	var groups [][]analysis.Summary
	for _, s := range sums {
		i := slices.IndexFunc(groups, func(g []analysis.Summary) bool { return g[0].Spec.Scale == s.Spec.Scale })
		if i < 0 {
			groups = append(groups, nil)
			i = len(groups) - 1
		}
		groups[i] = append(groups[i], s)
	}
	return groups
}
