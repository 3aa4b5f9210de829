package analysis

import (
	"slices"
	"time"

	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
)

// The swap-in rule, for runs without detector transitions (loadgen run
// standalone, or a detector that never said thrashing): the host thrashes
// while swap-ins stay at or above a tenth of the run's peak, and at least
// MinSwapInThreshold pages/s (on an emulated swap device, at least a tenth
// of its read I/Os a second when that is lower: see SwapInFloor), for
// SustainSamples samples in a row.
const (
	ThresholdShare     = 0.1
	MinSwapInThreshold = 100
	SustainSamples     = 3
)

// LateSlack is how far past t_f a consumer may finish and still be on time,
// beyond one sleep t_s: it checks t_f once per cycle, so an unhurried
// consumer ends within a cycle of it.
const LateSlack = time.Second

// Episode is when a run thrashed: from Onset to Recovery, in seconds since
// the run started.
type Episode struct {
	Source string // "detector" or "swap-in"
	Onset  float64
	// Recovery is valid when Recovered; a run can end still thrashing.
	Recovery  float64
	Recovered bool
	// Threshold is the swap-in rule's threshold, pages/s.
	Threshold float64
}

// Summary is one run's figures.
type Summary struct {
	ID, Preset, State string
	Spec              run.Resolved
	DurationSeconds   float64
	// PlannedOverload is when the planned demand first passes the limit.
	PlannedOverload    float64
	HasPlannedOverload bool
	// Detector and SwapIn are the two readings of the thrash episode; nil
	// when that source shows none. Primary is the detector's when present.
	Detector, SwapIn *Episode
	PeakSwapIn       float64
	PeakSwapInAt     float64
	PeakSwapOut      float64
	PeakPSISome      float64
	PeakPSIFull      float64
	// PeakConsumerStall is the consumers' summed stall in % of one CPU; -1
	// when the stall probe was not there.
	PeakConsumerStall float64
	Lateness          Lateness
	OOMKilled         []int // consumer indices
	Consumers         int
}

// Primary is the episode the report leads with: the detector's, else the
// swap-in rule's, else nil.
func (s Summary) Primary() *Episode {
	if s.Detector != nil {
		return s.Detector
	}
	return s.SwapIn
}

// Lateness is how late the consumers finished past their t_f.
type Lateness struct {
	Finished   int // consumers that ran and ended
	Late       int // of them, more than t_s + LateSlack past t_f
	Max, Mean  float64
	MaxIndex   int
	LateCutoff float64
}

// Summarise computes a run's summary.
func Summarise(rec run.Record, rows []store.Row) Summary {
	s := Summary{
		ID: rec.ID, Preset: rec.Spec.Preset, State: rec.State, Spec: rec.Spec,
		Consumers: len(rec.Consumers), PeakConsumerStall: -1,
	}
	if rec.EndedAt != nil {
		s.DurationSeconds = rec.EndedAt.Sub(rec.StartedAt).Seconds()
	}
	if d, ok := rec.Spec.Onset(); ok {
		s.PlannedOverload, s.HasPlannedOverload = d.Seconds(), true
	}
	elapsed := make([]float64, len(rows))
	swapIn := make([]float64, len(rows))
	for i, r := range rows {
		elapsed[i], swapIn[i] = r.ElapsedSeconds, r.SwapInPagesPerSecond
		if r.SwapInPagesPerSecond > s.PeakSwapIn {
			s.PeakSwapIn, s.PeakSwapInAt = r.SwapInPagesPerSecond, r.ElapsedSeconds
		}
		s.PeakSwapOut = max(s.PeakSwapOut, r.SwapOutPagesPerSecond)
		s.PeakPSISome = max(s.PeakPSISome, r.PressureSomePercent)
		s.PeakPSIFull = max(s.PeakPSIFull, r.PressureFullPercent)
		if v, ok := r.ConsumerStall(); ok {
			s.PeakConsumerStall = max(s.PeakConsumerStall, v)
		}
	}
	s.Detector = DetectorEpisode(rec)
	s.SwapIn = SwapInEpisode(elapsed, swapIn, SwapInFloor(rec.Spec))
	s.Lateness = ConsumerLateness(rec)
	for _, c := range rec.Consumers {
		if c.Exit == "oom-killed" {
			s.OOMKilled = append(s.OOMKilled, c.Index)
		}
	}
	return s
}

// DetectorEpisode reads the episode from the detector's transitions in the
// record: onset is the first entry into thrashing, recovery the last exit
// from it (to monitoring or normal); nil when it never said thrashing.
func DetectorEpisode(rec run.Record) *Episode {
	thrashing := indicators.StateNames[indicators.Thrashing]
	var e *Episode
	in := false
	for _, tr := range rec.Transitions {
		at := tr.At.Sub(rec.StartedAt).Seconds()
		switch {
		case tr.To == thrashing && !in:
			in = true
			if e == nil {
				e = &Episode{Source: "detector", Onset: at}
			}
			e.Recovered = false
		case tr.To != thrashing && in:
			in = false
			e.Recovery, e.Recovered = at, true
		}
	}
	return e
}

// SwapInFloor is the least threshold of the swap-in rule for a run:
// MinSwapInThreshold, which keeps a fast host's background paging out of
// an episode; on an emulated swap device that reads fewer than ten times
// that a second, a tenth of its read I/Os, the same share of the device the
// rule takes of a run's peak (12 pages/s on hdd-2013, where 100 would be
// most of what the device serves).
func SwapInFloor(spec run.Resolved) float64 {
	if r := spec.SwapDevice.ReadIOPS; r > 0 {
		return min(MinSwapInThreshold, ThresholdShare*float64(r))
	}
	return MinSwapInThreshold
}

// SwapInEpisode applies the swap-in rule to a run's samples: onset is the
// first sample of the first stretch of SustainSamples or more at or above
// the threshold; recovery is the first sample after the last such stretch
// that begins SustainSamples below it. Times are the samples' elapsed
// seconds (each row's rates cover the interval ending then); the threshold
// is a share of the peak, at least floor. Nil when the rates never stay up.
func SwapInEpisode(elapsed, swapIn []float64, floor float64) *Episode {
	if len(swapIn) == 0 {
		return nil
	}
	th := max(ThresholdShare*slices.Max(swapIn), floor)
	var first, lastEnd = -1, -1 // first stretch's start; last stretch's end (exclusive)
	for i := 0; i < len(swapIn); {
		if swapIn[i] < th {
			i++
			continue
		}
		j := i
		for j < len(swapIn) && swapIn[j] >= th {
			j++
		}
		if j-i >= SustainSamples {
			if first < 0 {
				first = i
			}
			lastEnd = j
		}
		i = max(j, i+1) // a value neither below nor at the threshold (NaN) is passed over
	}
	if first < 0 {
		return nil
	}
	e := &Episode{Source: "swap-in", Onset: elapsed[first], Threshold: th}
	for i := lastEnd; i+SustainSamples <= len(swapIn); i++ {
		quiet := true
		for _, v := range swapIn[i : i+SustainSamples] {
			quiet = quiet && v < th
		}
		if quiet {
			e.Recovery, e.Recovered = elapsed[i], true
			break
		}
	}
	return e
}

// ConsumerLateness summarises how late the consumers finished past t_f.
// Consumers that never started, or that the OOM killer ended, are left out:
// they did not finish. Late means more than t_s + LateSlack past t_f.
func ConsumerLateness(rec run.Record) Lateness {
	l := Lateness{MaxIndex: -1, LateCutoff: (rec.Spec.Sleep.D() + LateSlack).Seconds()}
	var sum float64
	for _, c := range rec.Consumers {
		if c.ActualStart == nil || c.ActualEnd == nil || c.Exit == "oom-killed" {
			continue
		}
		l.Finished++
		sum += c.LatenessSeconds
		if l.MaxIndex < 0 || c.LatenessSeconds > l.Max {
			l.Max, l.MaxIndex = c.LatenessSeconds, c.Index
		}
		if c.LatenessSeconds > l.LateCutoff {
			l.Late++
		}
	}
	if l.Finished > 0 {
		l.Mean = sum / float64(l.Finished)
	}
	return l
}
