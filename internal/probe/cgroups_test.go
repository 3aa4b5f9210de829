package probe

import (
	"testing"

	"github.com/thrashscope/thrashscope/internal/probe/readout"
)

func TestPendingSlotsAsInTheBPF(t *testing.T) {
	spec, err := loadThrashscope()
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Maps["cgroups_pending"]
	if m == nil {
		t.Fatal("no cgroups_pending map in the BPF object")
	}
	if m.MaxEntries != pendingSlots {
		t.Errorf("cgroups_pending has %d slots, Go reads %d", m.MaxEntries, pendingSlots)
	}
}

// addPending over two reads of two slots on two CPUs: what stood still is
// added; what moved only on the last try; a forgotten cgroup never, and
// it is forgotten for good once no slot holds it.
func TestAddPending(t *testing.T) {
	slot := func(id, seq, file uint64) thrashscopeCgroupPending {
		s := thrashscopeCgroupPending{Id: id, Seq: seq}
		s.Faults[readout.File] = file
		s.Latency.Slots[10] = file
		return s
	}
	before := [][]thrashscopeCgroupPending{
		{slot(7, 2, 5), slot(9, 4, 1)}, // slot 0: CPU 0, CPU 1
		{slot(0, 0, 0), slot(8, 6, 3)}, // slot 1
	}
	after := [][]thrashscopeCgroupPending{
		{slot(7, 2, 6), slot(15, 6, 1)}, // CPU 1 moved 9's counts into the map
		{slot(0, 0, 0), slot(8, 6, 4)},
	}
	for _, tc := range []struct {
		name      string
		last      bool
		forgotten uint64
		wantStill bool
		want      map[uint64]uint64 // file faults, over 100 in the map for 7, 8, 9
	}{
		{name: "a try", wantStill: false, want: map[uint64]uint64{7: 106, 8: 104, 9: 100}},
		{name: "the last", last: true, want: map[uint64]uint64{7: 106, 8: 104, 9: 100, 15: 1}},
		{name: "forgotten", last: true, forgotten: 8, want: map[uint64]uint64{7: 106, 9: 100, 15: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Probe{}
			cgroups := map[uint64]readout.CgroupCounters{}
			for _, id := range []uint64{7, 8, 9} {
				var c readout.CgroupCounters
				c.MajorFaults[readout.File] = 100
				cgroups[id] = c
			}
			if tc.forgotten != 0 {
				p.forgotten.add(tc.forgotten)
				delete(cgroups, tc.forgotten)
			}
			if still := p.addPending(cgroups, before, after, tc.last); still != tc.wantStill {
				t.Errorf("still = %v, want %v", still, tc.wantStill)
			}
			if len(cgroups) != len(tc.want) {
				t.Errorf("cgroups %v, want %v", cgroups, tc.want)
			}
			for id, want := range tc.want {
				if got := cgroups[id].MajorFaults[readout.File]; got != want {
					t.Errorf("cgroup %d: %d file faults, want %d", id, got, want)
				}
			}
			if tc.forgotten != 0 && !p.forgotten.has(tc.forgotten) {
				t.Errorf("cgroup %d forgotten while a slot holds it", tc.forgotten)
			}
			p.addPending(cgroups, after, [][]thrashscopeCgroupPending{{slot(7, 2, 6), slot(15, 6, 1)}, {{}, {}}}, false)
			if p.forgotten.has(8) {
				t.Error("cgroup 8 still forgotten once no slot holds it")
			}
		})
	}
}
