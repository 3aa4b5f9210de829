package run

import "time"

// Progress is a run's live state, for metrics and the progress line.
type Progress struct {
	Elapsed, Total  time.Duration
	Active, Planned int // consumers holding memory now; the plan's count
	Started, Ended  int
	DemandBytes     int64 // Active × S
	LimitBytes      int64
	SlowestCycle    time.Duration // over the last second or two
	Cycles          []uint64      // by consumer
	LatenessSeconds []float64     // by consumer; grows live past t_f
	ChunksDone      int           // fill: chunks filled over all repeats
}

// PolicyState is what a run's policy is doing, for metrics and the live
// page.
type PolicyState struct {
	Policy string
	// Decisions counts the actions taken, by kind.
	Decisions map[string]uint64
	// Frozen and Protected count the consumers held so now.
	Frozen, Protected int
	// Gauges are the policy's figures of its own (policy.Reporter), by
	// name; State its phrase for the run's one-line summary.
	Gauges map[string]float64
	State  string
	// Last is the most recent decision; nil before the first.
	Last *Decision
}
