package analysis

import (
	"math"
	"slices"

	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/stats"
)

// Totals sum up what a run cost and what it did.
type Totals struct {
	// Policy is the run's, none when it had none.
	Policy          string
	MakespanSeconds float64
	// SwapIns and MajorFaults are the host's over the run (pages; faults),
	// from the samples' rates.
	SwapIns, MajorFaults float64
	// MeanSlowdown and WorstSlowdown are over the consumers that finished
	// their work; NaN without a baseline.
	MeanSlowdown, WorstSlowdown float64
	// MeanLatenessSeconds is past t_f, for a timed run; NaN for a run of
	// fixed work.
	MeanLatenessSeconds float64
	// Cycles is the write cycles every consumer did; CyclesPerSwapIn the
	// progress each swap-in bought (Maziero et al. 2013 compare policies
	// by it).
	Cycles          uint64
	CyclesPerSwapIn float64
	// Consumers are each consumer's own figures.
	Consumers []ConsumerTotals
}

// ConsumerTotals are one consumer's share of a run.
type ConsumerTotals struct {
	Index int
	// MajorFaults are its own, from the per-process table (maj_flt).
	MajorFaults float64
	// HeldSeconds is how long the policy held it (protected or frozen).
	HeldSeconds float64
	Slowdown    float64 // NaN without one
}

// totals sums up one ended run from its record and tables.
func totals(r Recorded) Totals {
	rec := r.Record
	res := Totals{Policy: rec.Spec.Policy, MakespanSeconds: rec.MakespanSeconds,
		MeanSlowdown: math.NaN(), WorstSlowdown: math.NaN()}
	if res.MakespanSeconds == 0 || rec.State != run.StateCompleted {
		// A timed run, or one that did not finish its work (records
		// before the master left it out kept the time until the abort).
		res.MakespanSeconds = math.NaN()
	}
	if res.Policy == "" {
		res.Policy = policy.None
	}
	prev := 0.0
	for _, row := range r.Samples {
		dt := row.ElapsedSeconds - prev
		prev = row.ElapsedSeconds
		res.SwapIns += row.SwapInPagesPerSecond * dt
		res.MajorFaults += row.MajorFaultsPerSecond * dt
	}
	var slow, late []float64
	for _, c := range rec.Consumers {
		res.Cycles += c.Cycles
		late = append(late, c.LatenessSeconds)
		if c.Slowdown > 0 {
			slow = append(slow, c.Slowdown)
		}
	}
	if len(slow) > 0 {
		res.MeanSlowdown, _ = stats.MeanSD(slow)
		res.WorstSlowdown = slices.Max(slow)
	}
	res.MeanLatenessSeconds = math.NaN()
	if len(late) > 0 && !rec.Spec.Traits().Work {
		// Lateness is against t_f, the timed plan's: a run of fixed work
		// has a makespan and slowdowns instead.
		res.MeanLatenessSeconds, _ = stats.MeanSD(late)
	}
	if res.SwapIns > 0 {
		res.CyclesPerSwapIn = float64(res.Cycles) / res.SwapIns
	}
	res.Consumers = consumersOf(r)
	return res
}

// consumersOf sums up each consumer: its major faults over the run (rate ×
// interval, per row of the per-process table) and how long the policy
// held it.
func consumersOf(r Recorded) []ConsumerTotals {
	rec := r.Record
	out := make([]ConsumerTotals, len(rec.Consumers))
	last := map[int]float64{}
	for i, c := range rec.Consumers {
		out[i] = ConsumerTotals{Index: i, Slowdown: math.NaN()}
		if c.Slowdown > 0 {
			out[i].Slowdown = c.Slowdown
		}
		if c.ActualStart != nil {
			last[i] = c.ActualStart.Sub(rec.StartedAt).Seconds()
		}
	}
	for _, p := range r.Processes {
		if p.Consumer < 0 || p.Consumer >= len(out) {
			continue
		}
		from, ok := last[p.Consumer]
		last[p.Consumer] = p.ElapsedSeconds
		if v, has := p.MajorFaultRate(); has && ok {
			out[p.Consumer].MajorFaults += v * max(0, p.ElapsedSeconds-from)
		}
	}
	end := 0.0
	if rec.EndedAt != nil {
		end = rec.EndedAt.Sub(rec.StartedAt).Seconds()
	}
	for i := range out {
		spans, _ := HeldSpans(rec, i, end)
		for _, sp := range spans {
			out[i].HeldSeconds += sp[1] - sp[0]
		}
	}
	return out
}
