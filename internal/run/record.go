package run

import (
	"errors"
	"fmt"
	"time"

	"github.com/thrashscope/thrashscope/internal/settings"
	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// Run states, as in the run record.
const (
	StatePending   = "pending"
	StateRunning   = "running"
	StateCompleted = "completed"
	StateAborted   = "aborted"
	StateFailed    = "failed"
	// StateCorrupt marks a record that could not be read back (listed so
	// it is seen, never acted on).
	StateCorrupt = "corrupt"
)

// Record is a run record: what was asked, what was planned and what happened.
// It is the JSON of GET /api/v1/runs/{id} and of the record file.
type Record struct {
	ID        string           `json:"id"`
	Spec      Resolved         `json:"spec"`
	State     string           `json:"state"`
	Reason    string           `json:"reason,omitempty"`
	StartedAt time.Time        `json:"started_at"`
	EndedAt   *time.Time       `json:"ended_at,omitempty"`
	Cgroup    string           `json:"cgroup"`
	Consumers []ConsumerRecord `json:"consumers"`
	// OOMRescues counts the times the OOM guard reclaimed for the run's
	// consumers, where the kernel would have OOM-killed one (see
	// cgroup.OOMGuard): on v1 for consumers parked on a failed charge, on
	// v2 whenever usage passed memory.high by half the slack.
	OOMRescues uint64 `json:"oom_rescues,omitempty"`
	// OOMGuardCPUSeconds is the CPU time the OOM guard's thread spent
	// checking and reclaiming for the run: the kernel's reclaim for a
	// limit write runs in the writer, so on v1 much of the run's reclaim
	// is charged to the process that runs the run (the observer).
	OOMGuardCPUSeconds float64 `json:"oom_guard_cpu_seconds,omitempty"`
	// Transitions are the thrash detector's state changes during the run.
	Transitions []Transition `json:"transitions,omitempty"`
	// Pauses are the times the process running the run was not scheduled
	// for seconds (stopped by SIGSTOP, or starved of CPU): its timing, its
	// consumers' starts and its policy's decisions did not hold then.
	Pauses []Pause `json:"pauses,omitempty"`
	// Alone is, for a run of fixed work (spec cycles), the consumer of the
	// run's shape that ran alone in the run cgroup before the others: the
	// time each consumer's slowdown divides by.
	Alone *AloneRecord `json:"alone,omitempty"`
	// MakespanSeconds is, for a run of fixed work (spec cycles) that
	// completed, the time from the first consumer's start to the last
	// one's end.
	MakespanSeconds float64 `json:"makespan_seconds,omitempty"`
	// Decisions are what the run's policy did to its consumers, in order
	// (at most MaxDecisions; DecisionsDropped counts the rest).
	Decisions        []Decision `json:"decisions,omitempty"`
	DecisionsDropped uint64     `json:"decisions_dropped,omitempty"`
	// Protection is how the run's policy protects a consumer, for a
	// policy that does (tpf): "memory.min" (its memory cgroup's, where
	// memory is on cgroup v2) or "mlock" (the consumer locks its region).
	Protection string `json:"protection,omitempty"`
	// Pressure is the run cgroup's own memory.pressure over the run (its
	// group in the unified hierarchy where memory is on v1), read as it
	// ended; nil where the kernel keeps none.
	Pressure *Pressure `json:"pressure,omitempty"`
	// MemoryEvents are the run cgroup's memory.events as it ended (high,
	// max, oom, oom_kill; on v1, max is memory.failcnt). oom_kill counts
	// the kills in the consumers' sub-cgroups too, where the kernel counts
	// a victim on v1.
	MemoryEvents map[string]uint64 `json:"memory_events,omitempty"`
	// SwapEmulation is what the spec's swap device was on this host (the
	// disks throttled, where, which directions, and what the throttle
	// passed); nil for swap_device none.
	SwapEmulation *swapdev.Emulation `json:"swap_emulation,omitempty"`
	// Settings are the kernel's memory settings the spec asked and what
	// the kernel had before, during and after the run; nil for none.
	Settings *settings.Record `json:"settings,omitempty"`
}

// Pressure is a cgroup's PSI over a run: the time at least one of its
// tasks (some) and all of them at once (full) stalled on memory.
type Pressure struct {
	SomeSeconds float64 `json:"some_seconds"`
	FullSeconds float64 `json:"full_seconds"`
}

// MemoryEventNames are the memory_events keys a record may hold.
var MemoryEventNames = []string{"high", "max", "oom", "oom_kill"}

// MaxDecisions bounds the decisions a record keeps: a policy may decide
// at every switch of its consumers, and a run lasts up to MaxRunDuration.
const MaxDecisions = 20_000

// Decision is one action of the run's policy on one consumer.
type Decision struct {
	At time.Time `json:"at"`
	// Kind is protect, release, freeze or thaw.
	Kind     string `json:"kind"`
	Consumer int    `json:"consumer"`
	Why      string `json:"why"`
	// Error says why the lever failed; the policy's state stands.
	Error string `json:"error,omitempty"`
}

// ConsumerRecord is one consumer's plan and outcome.
type ConsumerRecord struct {
	Index        int        `json:"index"`
	PID          int        `json:"pid"`
	PlannedStart time.Time  `json:"planned_start"`
	ActualStart  *time.Time `json:"actual_start,omitempty"`
	PlannedEnd   time.Time  `json:"planned_end"`
	ActualEnd    *time.Time `json:"actual_end,omitempty"`
	Cycles       uint64     `json:"cycles"`
	// Lateness is how long after t_f the consumer finished; 0 when on time.
	LatenessSeconds float64 `json:"lateness_seconds"`
	// RunSeconds is, for a run of fixed work (spec cycles), the time from
	// the consumer's start to its end: its run time, which a slowdown
	// divides by its time alone.
	RunSeconds float64 `json:"run_seconds,omitempty"`
	// Slowdown is RunSeconds over the run time of the consumer that ran
	// alone (TPF's slowdown); absent without one.
	Slowdown float64 `json:"slowdown,omitempty"`
	// Exit is how it ended: "ok", "terminated", "oom-killed", "exit 3",
	// "signal killed", or empty while it runs.
	Exit string `json:"exit,omitempty"`
}

// AloneRecord is the consumer that ran alone before a run of fixed work.
type AloneRecord struct {
	PID         int        `json:"pid"`
	ActualStart time.Time  `json:"actual_start"`
	ActualEnd   *time.Time `json:"actual_end,omitempty"`
	Cycles      uint64     `json:"cycles"`
	RunSeconds  float64    `json:"run_seconds,omitempty"`
	Exit        string     `json:"exit,omitempty"`
}

// Pause is a time the process running a run was not scheduled: from At,
// for Seconds.
type Pause struct {
	At      time.Time `json:"at"`
	Seconds float64   `json:"seconds"`
}

// MaxPauses bounds a record's pauses; the longest are kept.
const MaxPauses = 100

// Transition is one detector state change.
type Transition struct {
	At        time.Time `json:"at"`
	To        string    `json:"to"`
	Processes []string  `json:"processes,omitempty"`
}

// Active reports whether a run in this state may still change.
func Active(state string) bool { return state == StatePending || state == StateRunning }

// ConsumerName is the consumer's comm and its metric label: consumer-07.
func ConsumerName(i int) string { return fmt.Sprintf("consumer-%02d", i) }

// Errors the run API maps to status codes.
var (
	// ErrBusy: another run is active (409).
	ErrBusy = errors.New("another run is active")
	// ErrNotFound: no run has that id (404).
	ErrNotFound = errors.New("no such run")
	// ErrNoStorage: the run's record cannot be written to the data
	// directory (a full disk, a read-only file system); nothing started.
	ErrNoStorage = errors.New("the run record cannot be written to the data directory")
)

// UnsafeError is a spec that cannot run safely on this host (422). The
// message says what to change.
type UnsafeError struct{ Msg string }

func (e *UnsafeError) Error() string { return e.Msg }

// Summary is a run as GET /api/v1/runs lists it: what it was and how it
// ended, without its consumers, transitions and decisions, which can make
// a record megabytes (GET /api/v1/runs/{id} has them).
type Summary struct {
	ID        string     `json:"id"`
	Spec      Resolved   `json:"spec"`
	State     string     `json:"state"`
	Reason    string     `json:"reason,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	Cgroup    string     `json:"cgroup"`
	// ConsumerCount and DecisionCount are how many the record holds
	// (decisions with those dropped past MaxDecisions).
	ConsumerCount   int     `json:"consumer_count"`
	DecisionCount   uint64  `json:"decision_count"`
	OOMRescues      uint64  `json:"oom_rescues,omitempty"`
	MakespanSeconds float64 `json:"makespan_seconds,omitempty"`
}

// Summary sums the record up.
func (rec *Record) Summary() Summary {
	return Summary{
		ID: rec.ID, Spec: rec.Spec, State: rec.State, Reason: rec.Reason, StartedAt: rec.StartedAt, EndedAt: rec.EndedAt,
		Cgroup: rec.Cgroup, ConsumerCount: len(rec.Consumers), DecisionCount: uint64(len(rec.Decisions)) + rec.DecisionsDropped,
		OOMRescues: rec.OOMRescues, MakespanSeconds: rec.MakespanSeconds,
	}
}

// DeviceLine names the run's emulated swap device and what was emulated on
// the host it ran on, for the report, the live page and loadgen; empty for
// none.
func (rec Record) DeviceLine() string {
	d := rec.Spec.SwapDevice
	if d.IsNone() {
		return ""
	}
	line := d.String()
	if e := rec.SwapEmulation; e != nil {
		line += "; " + e.Summary()
	}
	return line
}
