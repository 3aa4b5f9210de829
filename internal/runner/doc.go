// Package runner carries out runs, one at a time, for the observer and for
// a run without it (package standalone). One file per job:
//
//	slot.go        the slot of the one active run: Start, the run's end, Close
//	plan.go        executing a run's plan: its cgroup, the schedule, the
//	               consumers followed until they end
//	shape.go       the strategy by which a run of a shape is carried out,
//	               one file a shape (run.Shape):
//	shape_timed.go the paper's schedule, each consumer ending at its t_f
//	shape_work.go  fixed work, one consumer run alone first
//	shape_fill.go  one process filling chunks
//	end.go         the run's end: its teardown, the kernel's last counts,
//	               its final state
//	consumers.go   the consumer processes (package consumer): start, wait, stop
//	messages.go    what the consumers' messages add to the record
//	progress.go    whether each consumer makes progress
//	levers.go      what a policy acts through: freeze, page-out, protection
//	swapdevice.go  the emulated swap device's throttle
//	settings.go    the run's kernel memory settings: checked, applied,
//	               restored, and recovered after a crash under the host's
//	               lock
//	save.go        saving a run's record and tables, and recovering what a
//	               crashed predecessor left
//	stages.go      the pipeline's stages: the run's scope (Source), the
//	               recorder, and the governor, where the policy decides
//	service.go     the API's backend and the run side's Status
//
// The record is made once, by the plan (plannedRecord), and only the plan
// and what it owns change it. Only the strategies ask a run's shape;
// everything else reads the strategy, or the shape's run.Traits. The stages see a run through Running, so their
// tests need neither root nor a run.
package runner
