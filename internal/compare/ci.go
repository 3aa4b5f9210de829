package compare

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/thrashscope/thrashscope/internal/stats"
)

// ci95 is the half-width of the 95 % confidence interval of the mean of
// xs (Student's t, n−1 degrees of freedom); NaN under two values. Here,
// not in package stats: the daemon links that one, and need not link
// gonum's distributions.
func ci95(xs []float64) float64 {
	if len(xs) < 2 {
		return math.NaN()
	}
	_, sd := stats.MeanSD(xs)
	n := float64(len(xs))
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: n - 1}.Quantile(0.975)
	return t * sd / math.Sqrt(n)
}
