package probe

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"

	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

// Way is how the BPF programs reach the kernel's data. Each program is
// built both ways from one body (bpf/maps.bpf.h, BOTH_WAYS); Load loads
// one of them under the program's own name.
type Way string

const (
	// WayAuto takes the fast way where the kernel offers all it needs,
	// else the portable way.
	WayAuto Way = "auto"
	// WayFast reads the task through BTF pointers, keeps a thread's
	// fault in task storage and finds a mapping with bpf_find_vma (Linux
	// 5.17+).
	WayFast Way = "fast"
	// WayPortable reads the task with probe reads, keeps a thread's fault
	// in a hash keyed by its id and walks the mappings' index itself
	// (Linux 5.8+).
	WayPortable Way = "portable"
)

// Ways are the values --probes.way takes.
var Ways = []Way{WayAuto, WayFast, WayPortable}

// ParseWay reads a --probes.way value.
func ParseWay(s string) (Way, error) {
	if w := Way(s); slices.Contains(Ways, w) {
		return w, nil
	}
	return "", fmt.Errorf("--probes.way=%q: want one of auto, fast, portable", s)
}

// since is the oldest Linux each probe's programs load on, each way: what
// they need that an older kernel lacks (docs/kernels.md). The fast way's
// task BTF and task storage are 5.11's, bpf_find_vma 5.17's; the portable
// way's ring buffer (the sampler's wake, in major_fault and memory_stall)
// 5.8's, bpf_probe_read_kernel 5.5's; fault_latency is read back by
// major_fault.
var since = map[Way]map[string]string{
	WayFast: {
		readout.MajorFaults: "5.17", readout.MemoryStall: "5.11", readout.MemoryStallSample: "5.11",
		readout.FaultLatency: "5.17", readout.ProcessExit: "5.11",
	},
	WayPortable: {
		readout.MajorFaults: "5.8", readout.MemoryStall: "5.8", readout.MemoryStallSample: "5.5",
		readout.FaultLatency: "5.8", readout.ProcessExit: "5.5",
	},
}

// portableSuffix names a program's portable build in the object.
const portableSuffix = "_portable"

// fastNeed is one thing the fast way needs that older kernels lack, and
// how to ask the kernel for it.
type fastNeed struct {
	what, since string
	probe       func() error
}

var fastNeeds = []fastNeed{
	{"bpf_get_current_task_btf", "5.11", func() error {
		return features.HaveProgramHelper(ebpf.RawTracepoint, asm.FnGetCurrentTaskBtf)
	}},
	{"task storage", "5.11", func() error { return features.HaveMapType(ebpf.TaskStorage) }},
	{"bpf_task_storage_get in tracing programs", "5.11", func() error {
		return features.HaveProgramHelper(ebpf.RawTracepoint, asm.FnTaskStorageGet)
	}},
	{"bpf_find_vma", "5.17", func() error { return features.HaveProgramHelper(ebpf.PerfEvent, asm.FnFindVma) }},
}

// chooseWay settles WayAuto by asking the kernel for what the fast way
// needs, and says why: what the kernel lacks, or that the way was forced.
func chooseWay(asked Way, needs []fastNeed) (Way, string, error) {
	switch asked {
	case WayFast, WayPortable:
		return asked, "as --probes.way asks", nil
	case WayAuto, "":
	default:
		return "", "", fmt.Errorf("unknown probe way %q", asked)
	}
	var lacks []string
	for _, n := range needs {
		err := n.probe()
		switch {
		case err == nil:
		case errors.Is(err, ebpf.ErrNotSupported):
			lacks = append(lacks, fmt.Sprintf("%s (Linux %s+)", n.what, n.since))
		default:
			return "", "", fmt.Errorf("asking the kernel for %s: %w", n.what, err)
		}
	}
	if len(lacks) > 0 {
		return WayPortable, "this kernel lacks " + strings.Join(lacks, ", "), nil
	}
	return WayFast, "this kernel has task BTF, task storage and bpf_find_vma", nil
}

// selectWay leaves in spec the programs of one way, under their own names,
// and the maps only they use: the other way's programs and maps are
// dropped, so that nothing of it is loaded (a 5.10 kernel cannot even make
// the fast way's task storage).
func selectWay(spec *ebpf.CollectionSpec, way Way) {
	var dropped []*ebpf.ProgramSpec
	for _, name := range slices.Sorted(maps.Keys(spec.Programs)) {
		base, ok := strings.CutSuffix(name, portableSuffix)
		if !ok {
			continue
		}
		portable := spec.Programs[name]
		delete(spec.Programs, name)
		fast := spec.Programs[base]
		if way == WayPortable {
			spec.Programs[base] = renamed(portable, fast.Name, base)
			dropped = append(dropped, fast)
		} else {
			dropped = append(dropped, portable)
		}
	}
	used := map[string]bool{}
	for _, p := range spec.Programs {
		for _, ref := range mapRefs(p) {
			used[ref] = true
		}
	}
	for _, p := range dropped {
		for _, ref := range mapRefs(p) {
			if !used[ref] {
				delete(spec.Maps, ref)
			}
		}
	}
}

// renamed is a copy of p under the kernel name name and the function name
// fn: the kernel keeps 15 bytes of a program's name and tools (bpftool,
// cilium/ebpf's ProgramInfo, hence probe_program_runs_total) read the rest
// from the BTF function, which would otherwise say which way was built.
func renamed(p *ebpf.ProgramSpec, name, fn string) *ebpf.ProgramSpec {
	cp := p.Copy()
	cp.Name = name
	ins := &cp.Instructions[0]
	if f := btf.FuncMetadata(ins); f != nil {
		g := *f
		g.Name = fn
		*ins = btf.WithFuncMetadata(*ins, &g)
	}
	*ins = ins.WithSymbol(fn)
	return cp
}

// mapRefs are the maps a program refers to.
func mapRefs(p *ebpf.ProgramSpec) []string {
	var out []string
	for _, ins := range p.Instructions {
		if ref := ins.Reference(); ref != "" && ins.IsLoadFromMap() && !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	return out
}
