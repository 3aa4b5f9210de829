package testenv

import (
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
)

// Record is a valid run record for tests that save and read records back:
// an e4 run at scale 0.1 in the given state, without consumers.
func Record(id, state string, started time.Time) run.Record {
	spec, err := run.Resolve(run.Spec{Preset: "e4", Scale: new(0.1)})
	if err != nil {
		panic(err) // the preset is a constant
	}
	return run.Record{ID: id, Spec: spec, State: state, StartedAt: started}
}
