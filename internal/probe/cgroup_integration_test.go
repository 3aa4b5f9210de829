package probe

import (
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// loadCgroupsForTest is loadForTest with the per-cgroup counters on.
func loadCgroupsForTest(t *testing.T) *Probe {
	t.Helper()
	testenv.RequirePrivileged(t)
	p, err := Load(Options{Calm: -1, Cgroups: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if !p.Cgroups() {
		t.Fatal("the per-cgroup counters did not start")
	}
	return p
}

// groupID is a cgroup2 group's id: its directory's inode number.
func groupID(t *testing.T, g *cgroup.Cgroup) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(g.Path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// A cgroup's counters against the kernel's own: its major faults are the
// sum of its members' maj_flt over the window (within 2 %), of the kind
// the memory is, and its memory-stall time is the group's memory.pressure
// "some" total (within 20 %). One group holds one anon thrasher; the other
// three file thrashers that take turns, so that the group's "some" (time
// any member stalled) is the sum of theirs.
func TestCgroupCountersAgreeWithTheKernel(t *testing.T) {
	testenv.RequireSwap(t)
	for _, tc := range []struct {
		name, mode string
		kind       readout.Kind
		limit      int64
		members    int
		arg        func(t *testing.T) string
	}{
		{name: "one anon", mode: "thrash", kind: readout.Anon, limit: 64 << 20, members: 1, arg: func(*testing.T) string { return strconv.Itoa(80 << 20) }},
		{name: "three file in turn", mode: "thrash-file", kind: readout.File, limit: 48 << 20, members: 3, arg: func(t *testing.T) string { return testenv.UncachedFile(t, 128<<20) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loadCgroupsForTest(t)
			var before, after readout.CgroupCounters
			var majflt uint64
			var psi time.Duration
			var id uint64
			for try := 1; ; try++ {
				var ok bool
				if id, before, after, majflt, psi, ok = cgroupRound(t, p, tc.mode, tc.arg(t), tc.limit, tc.members); ok {
					break
				}
				if try == oomTries {
					t.Fatalf("the OOM killer took a member in all %d tries", oomTries)
				}
			}
			var got readout.FaultCounts
			for k := range readout.NumKinds {
				got[k] = after.MajorFaults[k] - before.MajorFaults[k]
			}
			stall := after.Stall.Total() - before.Stall.Total()
			t.Logf("%s: cgroup %d: bpf anon=%d shmem=%d file=%d unknown=%d, members' maj_flt %d; stall %v (off CPU %v), PSI some %v",
				tc.name, id, got[readout.Anon], got[readout.Shmem], got[readout.File], got[readout.Unknown], majflt, stall, after.Stall.OffCPU-before.Stall.OffCPU, psi)
			if majflt < 1000 {
				t.Fatalf("the members' maj_flt grew by %d only: they did not thrash, the test proves nothing", majflt)
			}
			testenv.Figure(t, "cgroup faults "+tc.name, "%+.1f%% of the members' maj_flt (%d)", 100*(float64(got.Total())-float64(majflt))/float64(majflt), majflt)
			if !within(got.Total(), majflt, 0.02) {
				t.Errorf("cgroup major faults %d, members' maj_flt %d: more than 2%% apart", got.Total(), majflt)
			}
			if got[tc.kind] < got.Total()*90/100 {
				t.Errorf("kind %s is %d of %d faults, want at least 90%%", tc.kind, got[tc.kind], got.Total())
			}
			if psi < 30*time.Millisecond {
				t.Fatalf("PSI some grew by %v only: the group did not stall, the test proves nothing", psi)
			}
			testenv.Figure(t, "cgroup stall "+tc.name, "%+.0f%% of PSI some (%v)", 100*(stall-psi).Seconds()/psi.Seconds(), psi.Round(time.Millisecond))
			if diff := stall - psi; diff.Abs() > psi/5 {
				t.Errorf("cgroup stall %v against its PSI some %v: %+.0f%%, want within 20%%", stall, psi, 100*diff.Seconds()/psi.Seconds())
			}
		})
	}
}

// cgroupRound puts members children in a group under a memory limit, and
// has them thrash one after another; it returns the group's id, its
// counters before and after, what the members' maj_flt grew by and what
// the group's PSI some grew by; ok is false when the OOM killer took one.
func cgroupRound(t *testing.T, p *Probe, mode, arg string, limit int64, members int) (id uint64, before, after readout.CgroupCounters, majflt uint64, psi time.Duration, ok bool) {
	t.Helper()
	cg := testenv.MemoryCgroup(t, limit)
	pg := testenv.NewPressureGroup(t, cg)
	id = groupID(t, pg.Cgroup)
	var cs []*child
	for range members {
		c := startChild(t, mode, arg)
		for _, g := range []*cgroup.Cgroup{cg.Cgroup, pg.Cgroup} {
			if err := g.Add(c.pid()); err != nil {
				t.Fatal(err)
			}
		}
		c.expect(t, "ready")
		cs = append(cs, c)
	}
	m0 := make([]uint64, members)
	for i, c := range cs {
		m0[i] = majFlt(t, c.pid())
	}
	psi0 := pg.MemorySomeTotal(t)
	snap, err := readArmed(p)
	if err != nil {
		t.Fatal(err)
	}
	before = snap.Cgroups[id]
	for _, c := range cs {
		if !c.runPhase(t, 3*time.Second) {
			return id, before, after, 0, 0, false
		}
	}
	psi = pg.MemorySomeTotal(t) - psi0
	if snap, err = readArmed(p); err != nil {
		t.Fatal(err)
	}
	after = snap.Cgroups[id]
	for i, c := range cs {
		majflt += majFlt(t, c.pid()) - m0[i]
	}
	return id, before, after, majflt, psi, true
}
