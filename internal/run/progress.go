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
