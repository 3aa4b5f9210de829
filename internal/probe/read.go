package probe

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

type readState struct {
	unseen uint64
	// The maps' batch buffers, kept from one read to the next: a read of
	// the cgroups map would otherwise allocate 512 of its 280-byte values,
	// each second, for the collector to sweep.
	faults batch[uint32, thrashscopeMajorFaults]
	stalls batch[uint32, thrashscopeStallTime]
	groups batch[uint64, thrashscopeCgroupStats]
}

const batchSize = 512

// Read reads every map once. Counters are cumulative; rates are the
// caller's. It attaches and detaches nothing: Arm, after it, does.
func (p *Probe) Read() (readout.Snapshot, error) {
	snap := readout.Snapshot{
		Processes: make(map[uint32]readout.ProcessCounters),
		Latency:   make(map[string]readout.Histogram, readout.NumKinds),
		Lost:      make(map[string]uint64, len(readout.Names)),
	}
	if err := p.readActivity(&snap); err != nil {
		return snap, err
	}
	if err := p.readCgroups(&snap); err != nil {
		return snap, err
	}
	err := p.reading.faults.read(p.objs.ProcessMajorFaults, func(tgid uint32, v thrashscopeMajorFaults) {
		c := snap.Processes[tgid]
		c.MajorFaults = readout.FaultCounts(v.Count)
		c.FaultService = time.Duration(v.ServiceNs)
		snap.Processes[tgid] = c
	})
	if err != nil {
		return snap, fmt.Errorf("reading process_major_faults: %w", err)
	}
	err = p.reading.stalls.read(p.objs.ProcessMemoryStall, func(tgid uint32, v thrashscopeStallTime) {
		c := snap.Processes[tgid]
		c.Stall = decodeStall(v)
		snap.Processes[tgid] = c
	})
	if err != nil {
		return snap, fmt.Errorf("reading process_memory_stall: %w", err)
	}

	if err := p.readHistograms(&snap); err != nil {
		return snap, err
	}
	snap.Lost[readout.MajorFaults] += p.reading.unseen

	if snap.Programs, err = p.programStats(); err != nil {
		return snap, err
	}
	return snap, nil
}

// readActivity reads what the probes saw: the perf counter of major faults
// (first: see unseenEvents), the faults and stalls the programs saw, and
// the mapping lookups.
func (p *Probe) readActivity(snap *readout.Snapshot) error {
	var perfCount uint64
	if p.perf != nil {
		var err error
		if perfCount, err = p.perf.Count(); err != nil {
			return err
		}
	}
	seen, err := sumPerCPU(p.objs.MajorFaultsSeen)
	if err != nil {
		return fmt.Errorf("reading major_faults_seen: %w", err)
	}
	p.reading.unseen = unseenEvents(p.reading.unseen, perfCount, seen)
	stalls, err := sumPerCPU(p.objs.MemoryStallsSeen)
	if err != nil {
		return fmt.Errorf("reading memory_stalls_seen: %w", err)
	}
	snap.Activity = readout.Activity{MajorFaultEvents: perfCount, StallsSeen: stalls}
	if snap.MappingLookups, err = sumPerCPU(p.objs.MappingLookups); err != nil {
		return fmt.Errorf("reading mapping_lookups: %w", err)
	}
	return nil
}

// readHistograms reads the fault latency by kind and the events each probe
// lost.
func (p *Probe) readHistograms(snap *readout.Snapshot) error {
	for i, kind := range readout.Kinds {
		var perCPU []thrashscopeLatencyHist
		if err := p.objs.MajorFaultLatency.Lookup(uint32(i), &perCPU); err != nil {
			return fmt.Errorf("reading major_fault_latency: %w", err)
		}
		snap.Latency[kind] = mergeLatency(perCPU)
	}

	for i, name := range readout.Names {
		var perCPU []uint64
		if err := p.objs.ProbeEventsLost.Lookup(uint32(i), &perCPU); err != nil {
			return fmt.Errorf("reading probe_events_lost: %w", err)
		}
		snap.Lost[name] = sum(perCPU)
	}
	return nil
}

// Arm attaches the on-demand hooks when a reading shows the host taking
// major faults or beginning stalls since the last Arm, and detaches them
// after the calm period without: the fault-entry hooks that time major
// faults (they run on every fault, minor ones too) and the CPU-clock stall
// samples. Call it after each Read, with that reading.
func (p *Probe) Arm(now time.Time, snap readout.Snapshot) {
	majors := false
	if p.perf != nil {
		majors = p.updateLatency(now, snap.Activity.MajorFaultEvents)
	}
	p.updateSampling(now, snap.Activity.StallsSeen, majors)
}

// programStats reads each program's run statistics from the kernel.
func (p *Probe) programStats() ([]readout.ProgramStats, error) {
	progs := p.programs()
	out := make([]readout.ProgramStats, 0, len(progs))
	for _, np := range progs {
		if np.prog == nil {
			continue // this kernel did not take it (notLoaded says why)
		}
		st, err := np.prog.Stats()
		if err != nil {
			return nil, fmt.Errorf("reading run statistics of %s: %w", np.name, err)
		}
		out = append(out, readout.ProgramStats{Name: np.name, Runs: st.RunCount, RunTime: st.Runtime})
	}
	return out, nil
}

type namedProgram struct {
	name string
	prog *ebpf.Program
}

// programs lists every program by its C name, in the order of the file.
func (p *Probe) programs() []namedProgram {
	o := &p.objs.thrashscopePrograms
	return []namedProgram{
		{"fault_entry_user", o.FaultEntryUser},
		{"fault_entry_kernel", o.FaultEntryKernel},
		{"filemap_fault", o.FilemapFault},
		{"major_fault", o.MajorFault},
		{"reclaim_begin_direct", o.ReclaimBeginDirect},
		{"reclaim_end_direct", o.ReclaimEndDirect},
		{"reclaim_begin_memcg", o.ReclaimBeginMemcg},
		{"reclaim_end_memcg", o.ReclaimEndMemcg},
		{"memory_stall_sample", o.MemoryStallSample},
		{"memory_stall", o.MemoryStall},
		{"process_exit", o.ProcessExit},
		{"cgroup_rmdir", o.CgroupRmdir},
	}
}

func sumPerCPU(m *ebpf.Map) (uint64, error) {
	var perCPU []uint64
	if err := m.Lookup(uint32(0), &perCPU); err != nil {
		return 0, err
	}
	return sum(perCPU), nil
}

// batch holds the keys and values of a batch lookup, reused by each read.
type batch[K comparable, V any] struct {
	keys []K
	vals []V
}

// read walks a hash map in batches, falling back to one key at a time on
// kernels without batch lookups. One reader at a time.
func (b *batch[K, V]) read(m *ebpf.Map, fn func(K, V)) error {
	if b.keys == nil {
		b.keys, b.vals = make([]K, batchSize), make([]V, batchSize)
	}
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, b.keys, b.vals, nil)
		for i := range n {
			fn(b.keys[i], b.vals[i])
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

func iterateHash[K comparable, V any](m *ebpf.Map, fn func(K, V)) error {
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		fn(k, v)
	}
	return it.Err()
}

// StallOf reads one process's memory stall so far, and false when the
// probe has not seen it stall (or it exited). It is one map lookup, cheap
// enough to bracket a measurement window of a few processes.
func (p *Probe) StallOf(tgid uint32) (readout.StallTime, bool) {
	var v thrashscopeStallTime
	if err := p.objs.ProcessMemoryStall.Lookup(tgid, &v); err != nil {
		return readout.StallTime{}, false
	}
	return decodeStall(v), true
}

// FaultServiceOf reads the time one process's timed major faults took so
// far, and false when the probe has not seen it fault (or it exited). One
// map lookup, as StallOf.
func (p *Probe) FaultServiceOf(tgid uint32) (time.Duration, bool) {
	var v thrashscopeMajorFaults
	if err := p.objs.ProcessMajorFaults.Lookup(tgid, &v); err != nil {
		return 0, false
	}
	return time.Duration(v.ServiceNs), true
}
