package runner

import (
	"time"

	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/run"
)

// fill carries out run.ShapeFill: one process filling chunks up to the
// demand, from the run's start until it is done, its chunks timed.
type fill struct{}

func init() { strategies[run.ShapeFill] = fill{} }

func (fill) groups(n int) int { return n }

func (fill) planned(_ run.Resolved, _ int, start time.Time) (time.Time, time.Time) {
	return start, start.Add(run.MaxRunDuration)
}

func (fill) collect(r *execution) { r.cycles.chunks = make([][]chunkSample, r.cfg.Spec.Consumers) }

func (fill) beforePlan(*execution) {}

func (fill) configure(r *execution, cc *consumer.Config) {
	cc.Mode, cc.Chunks, cc.Repeats = consumer.ModeFill, r.cfg.Spec.Consumers, r.cfg.Spec.Repeats
}

func (fill) deadline(spec run.Resolved, start time.Time) (time.Time, error) {
	return boundedDeadline(spec, start)
}

// progress: the one process is planned while it runs, and demands the
// chunks of the repeat it is in.
func (fill) progress(p *run.Progress, spec run.Resolved, _ *run.Record, _ time.Time, chunksDone int) {
	p.Total = spec.Duration()
	p.ChunksDone = chunksDone
	p.Planned = min(p.Active, 1)
	p.DemandBytes = int64(p.ChunksDone%max(spec.Consumers, 1)) * spec.SizeBytes
}

func (fill) finish(*run.Record) {}
