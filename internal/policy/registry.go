package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Registration is one policy as a run spec names it. Each policy's file
// registers it from init, the one place that knows its name: the run
// builds its levers from Needs, and the help texts list Summary.
type Registration struct {
	Name string
	// Summary says what it does, in a few words, for help texts.
	Summary string
	Needs   Needs
	New     func() Policy
	// Gauges are the figures of its own state it publishes, each as
	// thrashscope_run_policy_<Name> (0 under another policy and between
	// runs) and in the run's progress; its Policy reports their values.
	Gauges []Gauge
}

// Gauge is one figure of a policy's own state.
type Gauge struct {
	// Name is the metric name's last part: lower case and underscores.
	Name string
	Help string
}

// Reporter is a policy with figures of its own: the values of its
// registration's Gauges now, by name, and a phrase for the run's one-line
// summary ("bin 2 of 3 running"; empty when there is nothing to say).
type Reporter interface {
	Gauges() map[string]float64
	State() string
}

// AllGauges lists every registered policy's gauges, each name once, in
// the order of Registered: what a scrape publishes whatever the run.
func AllGauges() []Gauge {
	var out []Gauge
	for _, r := range Registered() {
		for _, g := range r.Gauges {
			if !slices.ContainsFunc(out, func(o Gauge) bool { return o.Name == g.Name }) {
				out = append(out, g)
			}
		}
	}
	return out
}

// Needs is what a policy asks of the run that carries it out.
type Needs struct {
	// Ticks: it decides on each tick. A policy that never acts is not
	// shown the run at all.
	Ticks bool
	// Freezer: it stops consumers, so each needs a cgroup v2 group of
	// its own to freeze.
	Freezer bool
	// Protection: it keeps a consumer's pages from reclaim (memory.min
	// where memory is on v2, else the consumer's mlock).
	Protection bool
	// OwnMemory: it sizes consumers by their own memory, resident or
	// swapped, read for each consumer on each tick.
	OwnMemory bool
}

var registry struct {
	sync.Mutex
	list []Registration
}

func register(r Registration) {
	registry.Lock()
	defer registry.Unlock()
	if slices.ContainsFunc(registry.list, func(q Registration) bool { return q.Name == r.Name }) {
		panic("policy " + r.Name + " registered twice")
	}
	registry.list = append(registry.list, r)
	// The default first, the rest by name.
	slices.SortFunc(registry.list, func(a, b Registration) int {
		if (a.Name == None) != (b.Name == None) {
			if a.Name == None {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

// Registered lists the policies: none first, then by name.
func Registered() []Registration {
	registry.Lock()
	defer registry.Unlock()
	return slices.Clone(registry.list)
}

// Lookup is the named policy's registration.
func Lookup(name string) (Registration, bool) {
	registry.Lock()
	defer registry.Unlock()
	i := slices.IndexFunc(registry.list, func(r Registration) bool { return r.Name == name })
	if i < 0 {
		return Registration{}, false
	}
	return registry.list[i], true
}

// NeedsOf is what the named policy needs; nothing for an unknown name.
func NeedsOf(name string) Needs {
	r, _ := Lookup(name)
	return r.Needs
}

// Names lists the policies' names, in the order of Registered.
func Names() []string {
	var out []string
	for _, r := range Registered() {
		out = append(out, r.Name)
	}
	return out
}

// Help lists the policies with their summaries, for a flag's help:
// "none (Linux as it is), tpf (…) or calmdown (…)".
func Help() string {
	var parts []string
	for _, r := range Registered() {
		parts = append(parts, fmt.Sprintf("%s (%s)", r.Name, r.Summary))
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}
