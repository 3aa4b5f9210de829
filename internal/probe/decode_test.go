package probe

import (
	"reflect"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  bool
	}{
		{in: "0", want: []int{0}},
		{in: "0-3", want: []int{0, 1, 2, 3}},
		{in: "0-1,4,6-7", want: []int{0, 1, 4, 6, 7}},
		{in: "", err: true},
		{in: "3-1", err: true},
		{in: "a-b", err: true},
	} {
		got, err := parseCPUList(tc.in)
		if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v, err %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestMergeLatencyAndBuckets(t *testing.T) {
	var a, b thrashscopeLatencyHist
	a.Slots[10] = 2 // [1024, 2048) ns
	b.Slots[10] = 1
	b.Slots[12] = 4 // [4096, 8192) ns
	b.Slots[30] = 1 // ~1 s, beyond the last bucket below
	a.SumNs, b.SumNs = 3000, 2_000_000_000
	h := mergeLatency([]thrashscopeLatencyHist{a, b})
	if h.Count() != 8 {
		t.Errorf("Count = %d, want 8", h.Count())
	}
	if h.SumSeconds != 2.000003 {
		t.Errorf("SumSeconds = %v, want 2.000003", h.SumSeconds)
	}
	got := h.CumulativeBuckets(11, 13)
	want := map[float64]uint64{
		4096e-9:  3, // slot 10 folds into the first bucket
		8192e-9:  7,
		16384e-9: 7,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CumulativeBuckets = %v, want %v", got, want)
	}
}

func TestUnseenEvents(t *testing.T) {
	for _, tc := range []struct {
		prev, perf, seen, want uint64
	}{
		{0, 100, 100, 0},
		{0, 100, 103, 0}, // faults after the perf read: not a loss
		{0, 105, 100, 5},
		{5, 200, 198, 5}, // never decreases
		{5, 210, 200, 10},
	} {
		if got := unseenEvents(tc.prev, tc.perf, tc.seen); got != tc.want {
			t.Errorf("unseenEvents(%d, %d, %d) = %d, want %d", tc.prev, tc.perf, tc.seen, got, tc.want)
		}
	}
}

// The Go names index BPF arrays: they must follow the C enums.
func TestNamesFollowTheBPFEnums(t *testing.T) {
	if len(readout.Names) != int(thrashscopeProbeIdPROBES) {
		t.Fatalf("%d probe names, BPF has %d probe ids", len(readout.Names), thrashscopeProbeIdPROBES)
	}
	for id, name := range map[thrashscopeProbeId]string{
		thrashscopeProbeIdPROBE_MAJOR_FAULTS:        readout.MajorFaults,
		thrashscopeProbeIdPROBE_MEMORY_STALL:        readout.MemoryStall,
		thrashscopeProbeIdPROBE_MEMORY_STALL_SAMPLE: readout.MemoryStallSample,
		thrashscopeProbeIdPROBE_FAULT_LATENCY:       readout.FaultLatency,
		thrashscopeProbeIdPROBE_PROCESS_EXIT:        readout.ProcessExit,
	} {
		if readout.Names[id] != name {
			t.Errorf("Names[%d] = %q, want %q", id, readout.Names[id], name)
		}
	}
	if got := len(thrashscopeMajorFaults{}.Count); got != readout.NumKinds {
		t.Errorf("BPF counts %d kinds, Go names %d", got, readout.NumKinds)
	}
	if int(thrashscopeFaultKindFAULT_KINDS) != readout.NumKinds {
		t.Errorf("the BPF fault_kind enum has %d kinds, Go %d", thrashscopeFaultKindFAULT_KINDS, readout.NumKinds)
	}
	for id, kind := range map[thrashscopeFaultKind]readout.Kind{
		thrashscopeFaultKindFAULT_ANON:    readout.Anon,
		thrashscopeFaultKindFAULT_SHMEM:   readout.Shmem,
		thrashscopeFaultKindFAULT_FILE:    readout.File,
		thrashscopeFaultKindFAULT_UNKNOWN: readout.Unknown,
	} {
		if readout.Kind(id) != kind {
			t.Errorf("fault kind %s is %d in Go, %d in the BPF enum", kind, kind, id)
		}
	}
	if got := len(thrashscopeLatencyHist{}.Slots); got != readout.LatencySlots {
		t.Errorf("BPF latency histograms have %d slots, Go %d", got, readout.LatencySlots)
	}
}

func TestFaultCountsAndStall(t *testing.T) {
	c := readout.FaultCounts{readout.Anon: 5, readout.Shmem: 3, readout.File: 7, readout.Unknown: 1}
	if c.Total() != 16 || c.SwapIns() != 8 {
		t.Errorf("Total %d, SwapIns %d; want 16 and 8", c.Total(), c.SwapIns())
	}
	s := decodeStall(thrashscopeStallTime{OffCpuNs: 1e6, ReclaimNs: 2e6, SampledNs: 3e6})
	if s.Total() != 6*time.Millisecond || s.OnCPU() != 5*time.Millisecond || s.OffCPU != time.Millisecond {
		t.Errorf("stall %+v: total %v, on CPU %v", s, s.Total(), s.OnCPU())
	}
	if readout.Shmem.String() != "shmem" || readout.Kind(0).String() != readout.KindAnon {
		t.Errorf("kind names %q %q", readout.Shmem, readout.Kind(0))
	}
}

// The kernel keeps 15 bytes of a program's name; tools that list programs
// (bpftool, the overhead benchmark) must still tell ours apart.
// Each way loads its programs under the same names.
func TestProgramNamesDifferInFifteenBytes(t *testing.T) {
	for _, way := range []Way{WayFast, WayPortable} {
		spec, err := loadThrashscope()
		if err != nil {
			t.Fatal(err)
		}
		selectWay(spec, way)
		seen := map[string]string{}
		for name, p := range spec.Programs {
			short := p.Name[:min(len(p.Name), 15)]
			if other, ok := seen[short]; ok {
				t.Errorf("%s way: programs %s and %s are both %q to the kernel", way, name, other, short)
			}
			seen[short] = name
		}
		var p Probe
		if got := len(p.programs()); got != len(spec.Programs) {
			t.Errorf("%s way: Probe.programs lists %d programs, the object has %d", way, got, len(spec.Programs))
		}
	}
}
