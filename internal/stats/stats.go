// Package stats holds thrashscope's one summary of repeated figures: the
// mean and the sample standard deviation, as the seeds report over their
// repeats.
package stats

import (
	"math"

	"gonum.org/v1/gonum/stat"
)

// MeanSD is the mean and the sample standard deviation (n-1) of xs; the SD
// is 0 for one value, as there is no spread to estimate, and both are NaN
// for none.
func MeanSD(xs []float64) (mean, sd float64) {
	switch len(xs) {
	case 0:
		return math.NaN(), math.NaN()
	case 1:
		return xs[0], 0
	}
	return stat.MeanStdDev(xs, nil) // the unbiased (n-1) SD
}
