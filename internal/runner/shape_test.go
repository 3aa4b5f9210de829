package runner

import (
	"testing"

	"github.com/thrashscope/thrashscope/internal/run"
)

// Every shape has its strategy: a shape registered in run without one
// here would start runs that nothing carries out.
func TestEveryShapeHasAStrategy(t *testing.T) {
	for _, s := range run.Shapes() {
		if strategies[s] == nil {
			t.Errorf("shape %d has no strategy: add a shape_*.go that registers one", s)
		}
	}
	if len(strategies) != len(run.Shapes()) {
		t.Errorf("%d strategies for %d shapes", len(strategies), len(run.Shapes()))
	}
}

// Each preset's spec comes to the strategy whose traits it has: the work
// strategy makes the group of the one alone, the fill one process.
func TestStrategiesFollowTheTraits(t *testing.T) {
	for _, p := range run.Presets() {
		spec := p.Spec
		tr := spec.Traits()
		s := strategyOf(spec)
		if got := s.groups(3); tr.Work != (got == 4) {
			t.Errorf("%s: traits %+v, but its strategy makes %d groups for 3 consumers", p.Name, tr, got)
		}
		if _, isFill := s.(fill); isFill != tr.Chunks {
			t.Errorf("%s: traits %+v, strategy %T", p.Name, tr, s)
		}
	}
}
