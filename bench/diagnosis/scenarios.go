package main

import (
	"fmt"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
)

const mib = 1 << 20

// scenario is one thrash with a known truth: the limit that binds, how
// much memory it lacks (its consumers' regions together, less the limit),
// and the remedy that ends it.
type scenario struct {
	name, what string
	// quick ones also run in make test (TestSuite); named ones run only
	// when --only names them (not yet a truth the suite can hold).
	quick, named bool
	// The run: consumers regions of size bytes each, in limit bytes,
	// backed by anonymous memory or by files.
	consumers   int
	size, limit int64
	backing     string
	// binding is the limit the truth says binds; remedy the first remedy
	// it calls for.
	binding diagnosis.LimitKind
	remedy  diagnosis.Action
	// shared, where set, is a parent group's limit: the suite makes the
	// parent, the run's group goes beneath it (its own limit too large
	// to bind), and a neighbour beside it grows to neighbour bytes,
	// locked in memory, once every consumer is active. The neighbour is
	// the culprit the truth names.
	shared, neighbour int64
	// burst: the thrash ends by itself as the first consumer leaves, at
	// the plateau's end (the one left fits its limit); the diagnosis is
	// read as the demand falls, and its first remedy must be to wait.
	burst bool
	// fill is the consumers' pages: random (incompressible, the default)
	// or zero (a compressed pool keeps each as one word); the diagnosis
	// must advise compressed swap for the one and rule it out for the
	// other, where the thrash is of swapped pages.
	fill string
	// device is the run's emulated swap device as the spec's swap_device
	// takes it (a profile's name in quotes, or an object of limits), ""
	// the host's own: the truth is then that the run's own I/O limit
	// holds the swap-ins back, and a faster device must be advised beside
	// the limit raised.
	device string
}

// compressible says whether the truth is that the pages compress.
func (s scenario) compressible() bool { return s.fill == "zero" }

// demand is what the run's consumers hold together once all are active.
func (s scenario) demand() int64 { return int64(s.consumers) * s.size }

// short is the truth: how much more the limit needs to hold the demand;
// under a shared limit, what it leaves beside the neighbour as planned,
// made exact at the end from the neighbour's charge as the kernel counts
// it (its runtime's pages beside its locked ones).
func (s scenario) short() int64 {
	switch {
	case s.shared > 0:
		return s.demand() - (s.shared - s.neighbour)
	case s.burst:
		return max(0, s.demand()-s.size-s.limit) // once the first has left
	}
	return s.demand() - s.limit
}

// interval is t_c: the plateau, every consumer active, lasts two of it,
// long enough for a diagnosis, its remedy, and a watch that the thrash
// stays ended while the demand is still there.
const interval = "25s"

// spec is the run the scenario induces over the observer's API: e4's
// consumers (t_s = 100 ms), one started every t_c, each writing five times
// as many random bytes a cycle as its region has pages, so that a cycle
// touches all but 1 % of them: its working set is its whole region, in any
// window of a cycle or more, which makes the truth above true. (With e4's
// W of 10,000 a cycle touches a sixth of a 200 MiB region, and a working
// set read over a few cycles is rightly smaller than the region.)
func (s scenario) spec() string {
	fill := s.fill
	if fill == "" {
		fill = "random"
	}
	device := ""
	if s.device != "" {
		device = `,"swap_device":` + s.device
	}
	return fmt.Sprintf(`{"preset":"e4","consumers":%d,"size_bytes":%d,"memory_limit_bytes":%d,"backing":%q,"fill":%q,"interval":%q,"writes_per_cycle":%d%s}`,
		s.consumers, s.size, s.limit, s.backing, fill, interval, 5*s.size/4096, device)
}

// scenarios is the suite, in the order it runs.
var scenarios = []scenario{
	{name: "short-25", quick: true, what: "2 consumers of 200 MiB (anon) in 320 MiB: their own limit 20 % under their demand (it needs 25 % more)",
		consumers: 2, size: 200 * mib, limit: 320 * mib, backing: "anon", binding: diagnosis.LimitOwn, remedy: diagnosis.ActionRaiseLimit},
	{name: "short-2x", what: "2 consumers of 200 MiB (anon) in 200 MiB: their own limit half their demand",
		consumers: 2, size: 200 * mib, limit: 200 * mib, backing: "anon", binding: diagnosis.LimitOwn, remedy: diagnosis.ActionRaiseLimit},
	{name: "file", what: "2 consumers of 200 MiB backed by files in 200 MiB: a page-cache thrash under their own limit",
		consumers: 2, size: 200 * mib, limit: 200 * mib, backing: "file", binding: diagnosis.LimitOwn, remedy: diagnosis.ActionRaiseLimit},
	{name: "neighbour", what: "2 consumers of 100 MiB (anon) under a parent's 400 MiB, their own limit 1 GiB; a neighbour under the parent grows to 300 MiB (locked) once they are active",
		consumers: 2, size: 100 * mib, limit: 1 << 30, backing: "anon", shared: 400 * mib, neighbour: 300 * mib,
		binding: diagnosis.LimitAncestor, remedy: diagnosis.ActionLimitCulprit},
	{name: "compressible", what: "short-25 with pages of zeros: compressed swap advised (a pool keeps each page as one word), the limit raised first",
		consumers: 2, size: 200 * mib, limit: 320 * mib, backing: "anon", fill: "zero", binding: diagnosis.LimitOwn, remedy: diagnosis.ActionRaiseLimit},
	// Named only: the zram device the suite tries as compressed swap is
	// outside the run's I/O limit, so it serves the swap-ins as a faster
	// device would, and ended the thrash though the pages compress 1:1.
	{name: "throttled", named: true, what: "short-25 with the run's swap I/O limited to 1,500 reads and writes a second: the disk idle, the limit spent; the limit raised first, a faster device advised beside it",
		consumers: 2, size: 200 * mib, limit: 320 * mib, backing: "anon", device: `{"read_iops":1500,"write_iops":1500}`, binding: diagnosis.LimitOwn, remedy: diagnosis.ActionRaiseLimit},
	// On hdd-2013 the workload's detector stays at monitoring: PSI
	// does not count its swap-ins' waits (docs/diagnoses.md), so no
	// diagnosis stays open to be held to the truth yet.
	{name: "hdd", named: true, what: "short-25 on the papers' disk (hdd-2013: 120 reads and 120 writes a second, the run's own I/O limit): the limit raised first, a faster device advised beside it",
		consumers: 2, size: 200 * mib, limit: 320 * mib, backing: "anon", device: `"hdd-2013"`, binding: diagnosis.LimitOwn, remedy: diagnosis.ActionRaiseLimit},
	{name: "burst", what: "2 consumers of 200 MiB (anon) in 320 MiB thrash for the plateau's 50 s; then the first leaves and the other fits: a burst that ends by itself",
		consumers: 2, size: 200 * mib, limit: 320 * mib, backing: "anon", burst: true, binding: diagnosis.LimitOwn, remedy: diagnosis.ActionWait},
}
