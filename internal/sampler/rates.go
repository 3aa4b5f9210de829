package sampler

import (
	"github.com/thrashscope/thrashscope/internal/probe/readout"
	"github.com/thrashscope/thrashscope/internal/row"
)

// Rates are the host's per-second figures between two samples: the
// indicators every reader shares (Host) and what the policies read besides.
type Rates struct {
	Seconds float64 // between the two samples
	// CPUBusyPercent is utilisation as TPF reads it: everything but idle
	// and iowait (a CPU waiting on paging I/O is not doing work).
	CPUBusyPercent float64
	// EvictedPagesPerSecond is what reclaim took from memory: pgsteal_anon
	// and pgsteal_file, or the swap-outs where the kernel has no pgsteal
	// (before 5.8).
	EvictedPagesPerSecond float64
	row.Host
}

// RatesBetween computes the rates from prev to cur. Counters that went
// backwards (a counter reset) give 0, not a negative rate.
func RatesBetween(prev, cur *Reading) Rates {
	secs := cur.Time.Sub(prev.Time).Seconds()
	if secs <= 0 {
		return Rates{}
	}
	r := Rates{Seconds: secs}
	total := func(s *Reading) float64 {
		c := s.CPU
		return c.User + c.Nice + c.System + c.Idle + c.IOWait + c.IRQ + c.SoftIRQ + c.Steal
	}
	if dt := total(cur) - total(prev); dt > 0 {
		pc, cc := prev.CPU, cur.CPU
		r.CPUUserPercent = 100 * pos(cc.User+cc.Nice-pc.User-pc.Nice) / dt
		r.CPUSystemPercent = 100 * pos(cc.System+cc.IRQ+cc.SoftIRQ-pc.System-pc.IRQ-pc.SoftIRQ) / dt
		r.CPUIOWaitPercent = 100 * pos(cc.IOWait-pc.IOWait) / dt
		r.CPUBusyPercent = 100 * pos(dt-(cc.Idle-pc.Idle)-(cc.IOWait-pc.IOWait)) / dt
	}
	pv, cv := prev.VMStat, cur.VMStat
	per := func(c, p uint64) float64 {
		if c < p {
			return 0
		}
		return float64(c-p) / secs
	}
	r.SwapInPagesPerSecond = per(cv.PswpIn, pv.PswpIn)
	r.SwapOutPagesPerSecond = per(cv.PswpOut, pv.PswpOut)
	r.PagedInKiBPerSecond = per(cv.PgpgIn, pv.PgpgIn)
	r.PagedOutKiBPerSecond = per(cv.PgpgOut, pv.PgpgOut)
	r.MajorFaultsPerSecond = per(cv.PgMajFault, pv.PgMajFault)
	r.EvictedPagesPerSecond = max(r.SwapOutPagesPerSecond, per(cv.PgStealAnon+cv.PgStealFile, pv.PgStealAnon+pv.PgStealFile))
	if prev.Pressure != nil && cur.Pressure != nil {
		psecs := secs
		if !prev.PressureTime.IsZero() && !cur.PressureTime.IsZero() {
			psecs = cur.PressureTime.Sub(prev.PressureTime).Seconds()
		}
		if psecs > 0 {
			// A share of the interval: the kernel's clock and the reads'
			// can disagree by a tick, never the stall exceed the time.
			r.PressureSomePercent = min(100, 100*pos((cur.Pressure.SomeTotal-prev.Pressure.SomeTotal).Seconds())/psecs)
			r.PressureFullPercent = min(100, 100*pos((cur.Pressure.FullTotal-prev.Pressure.FullTotal).Seconds())/psecs)
		}
	}
	return r
}

func pos(v float64) float64 { return max(v, 0) }

// ProcessRates are one process's per-second figures between two readings.
// They are computed here once, for every reader, with one rule: only for
// the same process (pid and start time) tracked in both readings; a pid
// reused by another process has none. A counter that went backwards (the
// probe forgot the process and met it again) gives 0.
type ProcessRates struct {
	// Faults are major faults by kind, from the probes (on procfs alone
	// every fault is of kind unknown: maj_flt does not tell them apart).
	Faults FaultRates
	// MajFlt is the kernel's own count, maj_flt in /proc/<pid>/stat, with
	// or without the probes.
	MajFlt float64
	// StallPercent is the time in a memory stall, as PSI counts it, in %
	// of one thread; valid when HasStall.
	StallPercent float64
	HasStall     bool
}

// FaultRates are major faults per second by kind, indexed as
// readout.FaultCounts.
type FaultRates [readout.NumKinds]float64

// Total is every major fault, whatever its kind.
func (f FaultRates) Total() float64 {
	var n float64
	for _, v := range f {
		n += v
	}
	return n
}

// SwapIns are the faults that read swap-backed memory back: anon and shmem.
func (f FaultRates) SwapIns() float64 { return f[readout.Anon] + f[readout.Shmem] }

// Complete fills in cur's rates against prev, the host's and its
// processes', as Read does; tests of later stages build readings with it.
func Complete(prev, cur *Reading) {
	cur.Rates, cur.HasRates = RatesBetween(prev, cur), true
	processRates(prev, cur)
}

// processRates fills in the rates of cur's processes against prev's.
func processRates(prev, cur *Reading) {
	secs := cur.Time.Sub(prev.Time).Seconds()
	if secs <= 0 {
		return
	}
	before := make(map[int]*Process, len(prev.Processes))
	for i := range prev.Processes {
		before[prev.Processes[i].PID] = &prev.Processes[i]
	}
	per := func(now, then uint64) float64 {
		if now < then {
			return 0
		}
		return float64(now-then) / secs
	}
	for i := range cur.Processes {
		p := &cur.Processes[i]
		b, ok := before[p.PID]
		if !ok || b.StartTicks != p.StartTicks {
			continue
		}
		p.HasRates = true
		for k := range p.Rates.Faults {
			p.Rates.Faults[k] = per(p.MajorFaults[k], b.MajorFaults[k])
		}
		p.Rates.MajFlt = per(p.Process.MajorFaults, b.Process.MajorFaults)
		if p.HasStall && b.HasStall {
			p.Rates.HasStall = true
			p.Rates.StallPercent = 100 * pos(p.Stall.Total().Seconds()-b.Stall.Total().Seconds()) / secs
		}
	}
}
