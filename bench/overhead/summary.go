package main

import "slices"

// summary is how a set of rounds is reported: the median as the figure, min
// and max so a reader can judge a ratio against the noise behind it.
type summary struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// summarize returns the median, min and max of xs; the zero summary when xs
// is empty.
func summarize(xs []float64) summary {
	if len(xs) == 0 {
		return summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	median := s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return summary{Median: median, Min: s[0], Max: s[n-1]}
}

// spreadPercent is max-min as a percentage of the median: the width of the
// noise band, directly comparable with a slowdown percentage.
func (s summary) spreadPercent() float64 {
	if s.Median == 0 {
		return 0
	}
	return (s.Max - s.Min) / s.Median * 100
}

// comparison is observed against baseline for one workload.
type comparison struct {
	Ratio           float64 `json:"ratio"`
	SlowdownPercent float64 `json:"slowdown_percent"`
}

// compare returns observed/baseline and the slowdown it means; a negative
// slowdown is the observed side running faster, i.e. noise. A zero baseline
// (never produced: a child reporting no ops is an error) compares as zero,
// since JSON has no NaN.
func compare(baseline, observed float64) comparison {
	if baseline == 0 {
		return comparison{}
	}
	r := observed / baseline
	return comparison{Ratio: r, SlowdownPercent: (1 - r) * 100}
}

// pairedComparison is observed against baseline within each round. The two
// phases of a round run back to back, so slow drift over the whole run
// (a warming host, a background job coming and going) cancels inside each
// pair, where it would widen both sides of a ratio of medians.
type pairedComparison struct {
	Ratios          []float64 `json:"ratios"`
	Ratio           summary   `json:"ratio"`
	SlowdownPercent float64   `json:"slowdown_percent"` // from the median ratio
}

// pairedRatios is observed/baseline of each round's pair; rounds are paired
// by index, as the benchmark appends one of each per round. A round with a
// zero baseline (never produced) is left out.
func pairedRatios(baseline, observed []float64) []float64 {
	var rs []float64
	for i := range min(len(baseline), len(observed)) {
		if baseline[i] != 0 {
			rs = append(rs, observed[i]/baseline[i])
		}
	}
	return rs
}

// comparePaired summarises the per-round ratios; nil without any pair.
func comparePaired(baseline, observed []float64) *pairedComparison {
	rs := pairedRatios(baseline, observed)
	if len(rs) == 0 {
		return nil
	}
	s := summarize(rs)
	return &pairedComparison{Ratios: rs, Ratio: s, SlowdownPercent: (1 - s.Median) * 100}
}
