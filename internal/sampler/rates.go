package sampler

// Rates are the host's per-second figures between two samples: the paper's
// indicators (CPU user and system %, pages swapped in and out per second)
// and the ones thrashscope adds.
type Rates struct {
	Seconds float64 // between the two samples
	// CPU shares of all CPUs, 0-100. User includes nice; system includes
	// irq and softirq, as top counts them.
	CPUUserPercent, CPUSystemPercent, CPUIOWaitPercent float64
	// CPUBusyPercent is utilisation as TPF reads it: everything but idle
	// and iowait (a CPU waiting on paging I/O is not doing work).
	CPUBusyPercent                              float64
	SwapInPagesPerSecond, SwapOutPagesPerSecond float64
	// PagedIn/Out are pgpgin/pgpgout: KiB of all block I/O.
	PagedInKiBPerSecond, PagedOutKiBPerSecond float64
	MajorFaultsPerSecond                      float64
	// PSI memory stall shares of the interval, 0-100; zero without PSI.
	PressureSomePercent, PressureFullPercent float64
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
	if prev.Pressure != nil && cur.Pressure != nil {
		psecs := secs
		if !prev.PressureTime.IsZero() && !cur.PressureTime.IsZero() {
			psecs = cur.PressureTime.Sub(prev.PressureTime).Seconds()
		}
		if psecs > 0 {
			r.PressureSomePercent = 100 * pos((cur.Pressure.SomeTotal - prev.Pressure.SomeTotal).Seconds()) / psecs
			r.PressureFullPercent = 100 * pos((cur.Pressure.FullTotal - prev.Pressure.FullTotal).Seconds()) / psecs
		}
	}
	return r
}

func pos(v float64) float64 { return max(v, 0) }
