// Package analysis measures a recorded run, once: every figure that
// observer report (summary.txt), observer compare (compare.txt) and
// observer findings (the reproduction's table) present comes from Measure.
// The three present the figures; none computes its own.
package analysis

import (
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
)

// Recorded is one ended run as recorded: its record and tables.
type Recorded struct {
	Record  run.Record
	Samples []store.Row
	// Processes is nil for runs recorded before processes.csv existed.
	Processes []store.ProcessRow
	// Fill is the fill preset's table; nil for other presets.
	Fill []store.FillRow
}

// Figures are one run's measured figures.
type Figures struct {
	// Summary is the run's thrash episodes, peaks, lateness and OOM kills
	// (summary.txt's).
	Summary Summary
	// Totals are what the run cost and what it did (a comparison's).
	Totals Totals
	// Shape is where its paging fell against its plan (the findings').
	Shape Shape
}

// Measure measures one ended run from its record and tables.
func Measure(r Recorded) Figures {
	s := newSeries(r)
	return Figures{Summary: s.sum, Totals: totals(r), Shape: s.shape()}
}
