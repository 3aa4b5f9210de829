package runner

import (
	"errors"
	"time"

	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/run"
)

// strategy is how a run of one shape (run.Shape) is carried out: each
// shape has one, in a file of its own (shape_*.go), chosen once as the
// run starts. The rest of the runner asks the strategy, never the shape.
type strategy interface {
	// groups is how many consumer sub-cgroups a run of n processes makes.
	groups(n int) int
	// planned is consumer i's planned start and end in a plan that starts
	// at start.
	planned(spec run.Resolved, i int, start time.Time) (begin, end time.Time)
	// collect sets up how the run's cycles or chunks reach it.
	collect(r *execution)
	// beforePlan runs on the spawning thread before the plan starts.
	beforePlan(r *execution)
	// configure makes consumer cc's command line of this shape.
	configure(r *execution, cc *consumer.Config)
	// deadline is when a run that started at start has overrun, and the
	// error that ends it then.
	deadline(spec run.Resolved, start time.Time) (time.Time, error)
	// progress fills in the plan's side of p (Total, Planned, the demand)
	// from the record at now; the counts of consumers are in p already.
	progress(p *run.Progress, spec run.Resolved, rec *run.Record, now time.Time, chunksDone int)
	// finish adds to the record of a run that ended what its shape keeps.
	finish(rec *run.Record)
}

// strategies are the shapes' strategies, each added by its file's init.
var strategies = map[run.Shape]strategy{}

// strategyOf is the strategy for spec's shape.
func strategyOf(spec run.Resolved) strategy { return strategies[spec.Shape()] }

// scheduled is what the shapes on the schedule share: each consumer at its
// Slot, its cycles on the board, each demanding its S while it is active.
type scheduled struct{}

func (scheduled) groups(n int) int { return n }

func (scheduled) planned(spec run.Resolved, i int, start time.Time) (time.Time, time.Time) {
	s := spec.Slot(i)
	return start.Add(s.Start), start.Add(s.End)
}

func (scheduled) collect(r *execution) {
	var err error
	if r.board, err = consumer.NewCycleBoard(len(r.procs)); err != nil {
		r.cfg.Logger.Warn("no cycle board; each write cycle is sent on its consumer's pipe", "run", r.cfg.ID, "err", err)
		r.board = nil
	}
}

func (scheduled) beforePlan(*execution) {}

func (scheduled) configure(*execution, *consumer.Config) {}

func (scheduled) finish(*run.Record) {}

// boundedDeadline is the run's time bound, for the shapes that end by
// their work, not by a plan.
func boundedDeadline(spec run.Resolved, start time.Time) (time.Time, error) {
	return start.Add(spec.Deadline()), errors.New("consumers still running at the run's time bound, " + run.MaxRunDuration.String() + "; ask for fewer cycles")
}
