package probe

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

// pendingSlots is CGROUP_PENDING_SLOTS in bpf/maps.bpf.h: the entries of
// cgroups_pending (held by the tests to the map's spec).
const pendingSlots = 16

// pendingTries bounds the reads while the programs keep moving slots into
// the map. On the last, a slot that moved is taken as read after the map:
// slots move often only when many cgroups share them, and then each holds
// a fault or two, which the total may miss or count twice until the next
// read (the workloads' counters never go back: see workload.Tracker).
const pendingTries = 2

// readCgroups reads the per-cgroup counters, when they are on: the cgroups
// map plus what each CPU's slots hold for a cgroup and have not added into
// it yet. The slots are read before and after the map; a slot whose seq
// is the same both times and even was not added meanwhile, so its counts
// are in neither read of the map twice nor in none.
func (p *Probe) readCgroups(snap *readout.Snapshot) error {
	if !p.cgroups {
		return nil
	}
	var err error
	removed := map[uint64]readout.CgroupCounters{}
	for try := range pendingTries {
		var before, after [][]thrashscopeCgroupPending
		if before, err = readPending(p.objs.CgroupsPending); err != nil {
			return err
		}
		if snap.Cgroups, err = readCgroupMap(p.objs.Cgroups, &p.reading.groups); err != nil {
			return err
		}
		// Drained after the map: a cgroup removed since the map was read
		// is in the queue; one removed before, in the queue and not the
		// map; one being removed, in both (the queue's is the later).
		if err := p.drainRemoved(removed); err != nil {
			return err
		}
		for id, c := range removed {
			snap.Cgroups[id] = c.AtLeast(snap.Cgroups[id])
		}
		if after, err = readPending(p.objs.CgroupsPending); err != nil {
			return err
		}
		if p.addPending(snap.Cgroups, before, after, try == pendingTries-1) {
			break
		}
	}
	if snap.CgroupEventsLost, err = sumPerCPU(p.objs.CgroupEventsLost); err != nil {
		return fmt.Errorf("reading cgroup_events_lost: %w", err)
	}
	if p.rmdirHooked {
		if snap.RemovedCgroupsLost, err = sumPerCPU(p.objs.RemovedCgroupsLost); err != nil {
			return fmt.Errorf("reading removed_cgroups_lost: %w", err)
		}
	}
	return nil
}

// drainRemoved takes the removed cgroups' last counts off their queue
// into removed: at most the queue's size, so a hook that keeps pushing
// cannot hold the reader.
func (p *Probe) drainRemoved(removed map[uint64]readout.CgroupCounters) error {
	if !p.rmdirHooked {
		return nil
	}
	for range p.objs.RemovedCgroups.MaxEntries() {
		var r thrashscopeRemovedCgroup
		if err := p.objs.RemovedCgroups.LookupAndDelete(nil, &r); errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading removed_cgroups: %w", err)
		}
		removed[r.Id] = decodeCgroup(r.Stats).AtLeast(removed[r.Id])
	}
	return nil
}

func readCgroupMap(m *ebpf.Map, b *batch[uint64, thrashscopeCgroupStats]) (map[uint64]readout.CgroupCounters, error) {
	cgroups := make(map[uint64]readout.CgroupCounters)
	err := b.read(m, func(id uint64, v thrashscopeCgroupStats) {
		cgroups[id] = decodeCgroup(v)
	})
	if err != nil {
		return nil, fmt.Errorf("reading cgroups: %w", err)
	}
	return cgroups, nil
}

// readPending reads every slot, each as its per-CPU values.
func readPending(m *ebpf.Map) ([][]thrashscopeCgroupPending, error) {
	slots := make([][]thrashscopeCgroupPending, pendingSlots)
	for i := range slots {
		if err := m.Lookup(uint32(i), &slots[i]); err != nil {
			return nil, fmt.Errorf("reading cgroups_pending: %w", err)
		}
	}
	return slots, nil
}

// addPending adds the slots that stood still between the two reads into
// cgroups (every slot when last), and reports whether every slot did. A
// removed cgroup's slot is left out: its cgroup is gone from the workloads.
func (p *Probe) addPending(cgroups map[uint64]readout.CgroupCounters, before, after [][]thrashscopeCgroupPending, last bool) bool {
	still := true
	held := map[uint64]bool{}
	for i := range after {
		for cpu, a := range after[i] {
			if a.Id == 0 {
				continue
			}
			held[a.Id] = true
			if b := before[i][cpu]; b.Seq != a.Seq || a.Seq%2 == 1 {
				still = false
				if !last {
					continue
				}
			}
			if p.forgotten.has(a.Id) {
				continue
			}
			cgroups[a.Id] = addCounts(cgroups[a.Id], a)
		}
	}
	p.forgotten.keep(held)
	return still
}

// addCounts adds a slot's faults and service times to a cgroup's counters.
func addCounts(c readout.CgroupCounters, s thrashscopeCgroupPending) readout.CgroupCounters {
	for k, n := range s.Faults {
		c.MajorFaults[k] += n
	}
	h := mergeLatency([]thrashscopeLatencyHist{s.Latency})
	for i, n := range h.Slots {
		c.Latency.Slots[i] += n
	}
	c.Latency.SumSeconds += h.SumSeconds
	return c
}

// ForgetCgroup drops a removed cgroup's counters, so that the map holds
// the live ones only (a cgroup's id is never reused while the host runs).
// A CPU's slot may still hold the cgroup's last faults; they are not read,
// and the entry they make when they are added is dropped in its turn.
func (p *Probe) ForgetCgroup(id uint64) {
	if p.cgroups {
		p.forgotten.add(id)
		_ = p.objs.Cgroups.Delete(id) // gone already: nothing to drop
	}
}

// forgottenCgroups are removed cgroups that a CPU's slot may hold. Bounded:
// an id leaves once no slot holds it, so there are never more than the
// slots, plus those forgotten since the last read.
type forgottenCgroups struct {
	mu  sync.Mutex
	ids map[uint64]bool
}

func (f *forgottenCgroups) add(id uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = map[uint64]bool{}
	}
	f.ids[id] = true
}

func (f *forgottenCgroups) has(id uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[id]
}

// keep drops the ids no slot holds.
func (f *forgottenCgroups) keep(held map[uint64]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.ids {
		if !held[id] {
			delete(f.ids, id)
		}
	}
}
