package probe

import (
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// A program the kernel refuses (as 6.1's verifier refused major_fault, or
// a kernel before 5.17 refuses bpf_find_vma) leaves the others loaded: the
// refused one is named with why, its field stays nil, and the others work.
func TestAProgramTheKernelRefusesLeavesTheOthers(t *testing.T) {
	testenv.RequirePrivileged(t)
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	spec, err := loadThrashscope()
	if err != nil {
		t.Fatal(err)
	}
	selectWay(spec, WayFast)
	// major_fault reads a register it never set: the verifier refuses it.
	spec.Programs["major_fault"].Instructions = asm.Instructions{
		asm.Mov.Reg(asm.R0, asm.R7),
		asm.Return(),
	}
	kernel, err := kernelBTF("/sys")
	if err != nil {
		t.Fatal(err)
	}
	var objs thrashscopeObjects
	failed, err := loadObjectsFrom(spec, &objs, kernel)
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	if len(failed) != 1 || failed["major_fault"] == nil {
		t.Fatalf("failed %v, want major_fault alone", failed)
	}
	if !strings.Contains(failed["major_fault"].Error(), "R7") {
		t.Errorf("the reason %q does not give the verifier's", failed["major_fault"])
	}
	if objs.MajorFault != nil || objs.MemoryStall == nil || objs.ProcessExit == nil || objs.ProcessMajorFaults == nil || objs.LatencyArmed == nil {
		t.Errorf("after a refused major_fault: %+v", objs)
	}
	// The programs share the maps: process_exit clears the very map
	// memory_stall counts in.
	shared, err := objs.ProcessMemoryStall.Info()
	if err != nil {
		t.Fatal(err)
	}
	sharedID, _ := shared.ID()
	for _, prog := range []*ebpf.Program{objs.MemoryStall, objs.ProcessExit} {
		info, err := prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		if ids, _ := info.MapIDs(); !slices.Contains(ids, sharedID) {
			t.Errorf("program %s uses maps %v, not process_memory_stall (%d): the maps are not shared", info.Name, ids, sharedID)
		}
	}
	p := &Probe{objs: objs, notLoaded: failed}
	st := p.attachMajorFaults([]int{0}, nil)
	if st.Attached || st.Err == nil || !strings.Contains(st.Err.Error(), "program major_fault did not load on this kernel") {
		t.Errorf("major_faults status %+v, want down and saying why", st)
	}
	if st := p.attachRawTracepoint("process_exit", "sched_process_exit", "process_exit", objs.ProcessExit); !st.Attached {
		t.Errorf("process_exit did not attach: %v", st.Err)
	}
	for _, l := range p.links {
		l.Close()
	}
}
