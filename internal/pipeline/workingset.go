package pipeline

import (
	"context"
	"sync/atomic"

	"github.com/thrashscope/thrashscope/internal/indicators"
)

// WorkingSetScan is the working-set stage: a sink that learns from each
// tick which processes to scan, and scans them on its own clock (the
// estimator's interval) on a goroutine of its own, which Pipeline.Run
// starts and stops. The indicators read its estimates at the next ticks.
type WorkingSetScan struct {
	ws *indicators.WorkingSet
	// scope is the active run's, read live at each round: its consumers
	// come first whatever their activity. Nil without runs.
	scope  func() indicators.Scope
	latest atomic.Pointer[Tick]
}

// Observe keeps the newest tick, whose processes the next round scans.
func (s *WorkingSetScan) Observe(_, cur *Tick) { s.latest.Store(cur) }

// run scans until ctx is done.
func (s *WorkingSetScan) run(ctx context.Context) { s.ws.Run(ctx, s.pids) }

// pids are what a round scans, in the order the page budget serves them:
// the active run's consumers, then the newest tick's processes, busiest
// first.
func (s *WorkingSetScan) pids() []int {
	var pids []int
	seen := map[int]bool{}
	if s.scope != nil {
		for _, pid := range s.scope().PIDs {
			pids, seen[pid] = append(pids, pid), true
		}
	}
	if t := s.latest.Load(); t != nil && t.Reading != nil {
		for _, p := range t.Reading.Processes {
			if !seen[p.PID] {
				pids = append(pids, p.PID)
			}
		}
	}
	return pids
}
