package runner

import (
	"errors"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
)

// timed carries out run.ShapeTimed: consumers on the schedule, each ending
// at its planned t_f; the run ends a grace after the last one's.
type timed struct{ scheduled }

func init() { strategies[run.ShapeTimed] = timed{} }

func (timed) deadline(spec run.Resolved, start time.Time) (time.Time, error) {
	grace := spec.Grace() // the last cycles past t_f
	return start.Add(spec.Deadline() + grace), errors.New("consumers still running " + grace.String() + " after the plan ended")
}

func (timed) progress(p *run.Progress, spec run.Resolved, _ *run.Record, _ time.Time, _ int) {
	p.Total, p.Planned = spec.Duration(), spec.ActiveAt(p.Elapsed)
	p.DemandBytes = int64(p.Active) * spec.SizeBytes
}
