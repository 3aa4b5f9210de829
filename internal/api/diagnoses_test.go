package api

import (
	"time"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
)

// fakeDiagnoses holds one open diagnosis and one closed, made by the
// real tracker, so that every field the spec describes is filled.
type fakeDiagnoses struct{ open, closed []diagnosis.Diagnosis }

func (f fakeDiagnoses) Open() []diagnosis.Diagnosis    { return f.open }
func (f fakeDiagnoses) History() []diagnosis.Diagnosis { return f.closed }

func newFakeDiagnoses() fakeDiagnoses {
	const mib = 1 << 20
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	s := diagnosis.Sample{
		Group: "/pod/victim", Labels: map[string]string{"cgroup": "/pod/victim", "unit": "victim.service"}, Thrashing: true,
		Limits:    []diagnosis.Limit{{Kind: diagnosis.LimitAncestor, Group: "/pod", File: "memory.max", Bytes: 1024 * mib, UsedBytes: 1024 * mib}},
		Host:      diagnosis.Host{TotalBytes: 24 << 30, AvailableBytes: 20 << 30},
		Demand:    diagnosis.Demand{WorkingSetBytes: 500 * mib, ResidentBytes: 300 * mib, SwapBytes: 300 * mib},
		Evidence:  diagnosis.Evidence{AnonFaultsPerSecond: 900, DeviceBusyPercent: 40, Device: "vdb", PoolFullPercent: -1, CompressRatio: 1.2, CompressPages: 512},
		Growth:    diagnosis.GrowthOf(map[string][]diagnosis.Point{"/pod/neighbour": {{At: t0, Bytes: 400 * mib}, {At: t0.Add(time.Minute), Bytes: 724 * mib}}}),
		Processes: 2,
	}
	tr := diagnosis.NewTracker()
	tr.Update(t0.Add(time.Minute), []diagnosis.Sample{s})
	open := tr.Open()
	calm := s
	calm.Thrashing, calm.Processes = false, 1
	tr.Update(t0.Add(2*time.Minute), []diagnosis.Sample{s})
	return fakeDiagnoses{open: open, closed: tr.Update(t0.Add(3*time.Minute), []diagnosis.Sample{calm})}
}
