package engine

import "github.com/thrashscope/thrashscope/internal/indicators"

// Source is the pipeline's first input: the active run's scope.
type Source struct {
	current func() Running // nil when no run is active
}

// Scope is the active run's live consumers, tracked whatever their
// activity, and its cgroup limit, for the working-set ratio; the zero Scope
// when no run is active.
func (s Source) Scope() indicators.Scope {
	r := s.current()
	if r == nil {
		return indicators.Scope{}
	}
	return indicators.Scope{PIDs: r.PIDs(), LimitBytes: r.Record().Spec.MemoryLimitBytes}
}
