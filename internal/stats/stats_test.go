package stats

import (
	"math"
	"testing"
)

func TestMeanSD(t *testing.T) {
	m, sd := MeanSD([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	if m != 5 || math.Abs(sd-math.Sqrt(32.0/7)) > 1e-12 {
		t.Errorf("got %g ± %g", m, sd)
	}
	if m, sd := MeanSD([]float64{3}); m != 3 || sd != 0 {
		t.Errorf("one value: %g ± %g", m, sd)
	}
	if m, sd := MeanSD(nil); !math.IsNaN(m) || !math.IsNaN(sd) {
		t.Errorf("no values: %g ± %g", m, sd)
	}
}
