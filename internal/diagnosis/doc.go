// Package diagnosis says why a thrash happens and what would end it: for a
// workload (or the host) whose detector reaches thrashing, the kind of
// thrash and its evidence, the limit that binds, how much memory that limit
// would need to hold the working set, who took the memory where the limit
// is shared, and the remedies ranked by what they would do.
//
//	limit.go     the binding limit: the group's own memory.max or
//	             memory.high, an ancestor's, or the host's memory
//	shortfall.go how much more the binding limit needs, with an interval
//	culprit.go   which sibling grew into the memory the victim lost
//	kind.go      the kind of thrash, from the faults by kind and the swap
//	remedy.go    the remedies, ranked, each with its expected effect
//	tracker.go   a diagnosis's life: opened at thrashing, updated each
//	             sample, closed with what ended it
//	history.go   the last closed diagnoses, kept in the data dir
//
// Everything here works on readings handed in (Sample): the package reads
// no probe and holds no clock, so its rules are tested without root.
package diagnosis
