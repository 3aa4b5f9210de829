// Package policy holds the thrash-control policies a run can be put under,
// each a small state machine stepped once per tick with what the run looks
// like, answering with the actions to take on the run's consumers:
//
//   - none: Linux as it is;
//   - tpf: Jiang and Zhang (2001)'s protection of one high-fault process;
//   - binpack: Reuven and Wiseman (2006)'s medium-term scheduler;
//   - calmdown: the FreeBSD rule Maziero et al. (2013) describe.
//
// A policy only decides: it names consumers of the run by index, never a
// process of the host, and the run carries the actions out (sub-cgroups,
// freezing, locking, paging out).
package policy

import (
	"fmt"
	"strings"
	"time"
)

// None is Linux as it is, the default policy.
const None = "none"

// Consumer is what a policy knows of one active consumer of the run.
type Consumer struct {
	Index int
	// DemandBytes is its memory allocation demand (TPF): its S while it
	// runs.
	DemandBytes int64
	// ResidentBytes is what it holds in memory (its RSS, shared file
	// pages such as its binary's text included); OwnResidentBytes the
	// part that is its own (anonymous and shared memory), and SwapBytes
	// what it holds in swap.
	ResidentBytes, OwnResidentBytes, SwapBytes int64
	// SwapInRate is its major faults served from swap, per second.
	SwapInRate float64
	// HighFault: it is in the detector's high-fault set.
	HighFault bool
	// Since is when it became active (calmdown stops the most recent).
	Since time.Time
}

// Size is what a consumer needs in memory now: its own pages, resident
// or swapped. Its file pages are left out: they are shared (every consumer
// maps the same binary), and counted once a consumer they would take bins
// that hold no consumer's own memory.
func (c Consumer) Size() int64 { return c.OwnResidentBytes + c.SwapBytes }

// Tick is the run at one tick, as a policy sees it.
type Tick struct {
	Now time.Time
	// Thrashing: the detector is in its thrashing state.
	Thrashing bool
	// CPUBusyPercent is CPU utilisation as TPF reads it (0-100).
	CPUBusyPercent float64
	// LimitBytes is the run cgroup's limit; FreeBytes what is left of it.
	LimitBytes, FreeBytes int64
	// Consumers are the run's active consumers; held ones (frozen by a
	// policy) included.
	Consumers []Consumer
}

// Kind is what an action does to one consumer.
type Kind string

// The actions.
const (
	Protect Kind = "protect" // keep its pages from being stolen
	Release Kind = "release" // end a protection
	Freeze  Kind = "freeze"  // stop it (and page it out)
	Thaw    Kind = "thaw"    // let it run again
)

// Action is one decision about one consumer.
type Action struct {
	Kind     Kind
	Consumer int
	Why      string
}

func (a Action) String() string { return fmt.Sprintf("%s consumer %d: %s", a.Kind, a.Consumer, a.Why) }

// Policy is one thrash-control policy's state machine.
type Policy interface {
	// Step decides on one tick. The run carries out every action in order
	// before the next tick.
	Step(Tick) []Action
}

// New returns the named policy with the papers' parameters; "" is none.
func New(name string) (Policy, error) {
	if name == "" {
		name = None
	}
	r, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("policy %q: want one of %s", name, strings.Join(Names(), ", "))
	}
	return r.New(), nil
}
