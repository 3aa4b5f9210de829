package probe

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
)

// Snapshot is everything the probes have counted so far.
type Snapshot struct {
	Processes map[uint32]ProcessCounters // by tgid; only processes the probes have seen
	Latency   map[string]Histogram       // by fault kind
	Lost      map[string]uint64          // by probe name
}

type readState struct {
	unseen uint64
}

const batchSize = 512

// Read reads every map once. Counters are cumulative; rates are the caller's.
func (p *Probe) Read() (Snapshot, error) {
	snap := Snapshot{
		Processes: make(map[uint32]ProcessCounters),
		Latency:   make(map[string]Histogram, len(Kinds)),
		Lost:      make(map[string]uint64, len(Names)),
	}

	// The perf counters go first: see unseenEvents.
	var perfCount uint64
	if p.perf != nil {
		var err error
		if perfCount, err = p.perf.Count(); err != nil {
			return snap, err
		}
		p.updateLatency(time.Now(), perfCount)
	}
	var seen []uint64
	if err := p.objs.MajorFaultsSeen.Lookup(uint32(0), &seen); err != nil {
		return snap, fmt.Errorf("reading major_faults_seen: %w", err)
	}
	p.reading.unseen = unseenEvents(p.reading.unseen, perfCount, sum(seen))

	err := readHash(p.objs.ProcessMajorFaults, func(tgid uint32, v thrashscopeMajorFaults) {
		c := snap.Processes[tgid]
		c.MajorFaults = v.Count
		snap.Processes[tgid] = c
	})
	if err != nil {
		return snap, fmt.Errorf("reading process_major_faults: %w", err)
	}
	err = readHash(p.objs.ProcessMemoryStall, func(tgid uint32, ns uint64) {
		c := snap.Processes[tgid]
		c.StallNanoseconds = ns
		snap.Processes[tgid] = c
	})
	if err != nil {
		return snap, fmt.Errorf("reading process_memory_stall: %w", err)
	}

	for i, kind := range Kinds {
		var perCPU []thrashscopeLatencyHist
		if err := p.objs.MajorFaultLatency.Lookup(uint32(i), &perCPU); err != nil {
			return snap, fmt.Errorf("reading major_fault_latency: %w", err)
		}
		snap.Latency[kind] = mergeLatency(perCPU)
	}

	for i, name := range Names {
		var perCPU []uint64
		if err := p.objs.ProbeEventsLost.Lookup(uint32(i), &perCPU); err != nil {
			return snap, fmt.Errorf("reading probe_events_lost: %w", err)
		}
		snap.Lost[name] = sum(perCPU)
	}
	snap.Lost[MajorFaults] += p.reading.unseen
	return snap, nil
}

// readHash walks a hash map in batches, falling back to one key at a time on
// kernels without batch lookups.
func readHash[V any](m *ebpf.Map, fn func(uint32, V)) error {
	keys := make([]uint32, batchSize)
	vals := make([]V, batchSize)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			fn(keys[i], vals[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil
		case errors.Is(err, ebpf.ErrNotSupported):
			return iterateHash(m, fn)
		case err != nil:
			return err
		}
	}
}

func iterateHash[V any](m *ebpf.Map, fn func(uint32, V)) error {
	var k uint32
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		fn(k, v)
	}
	return it.Err()
}
