package run

import "time"

// Slot is one consumer's planned activity, as offsets from the run start.
type Slot struct {
	Index int
	Start time.Duration // when it allocates
	End   time.Duration // t_f: when it stops writing and frees
}

// Slot returns consumer i's plan: active over [lead_in + i·t_c,
// lead_in + (i+N+1)·t_c]. Maziero et al. (2013) report all 25 consumers
// active in [730 s, 790 s] at t_c = 30 s, which fixes this form.
func (r Resolved) Slot(i int) Slot {
	tc := r.Interval.D()
	return Slot{
		Index: i,
		Start: r.LeadIn.D() + time.Duration(i)*tc,
		End:   r.LeadIn.D() + time.Duration(i+r.Consumers+1)*tc,
	}
}

// Schedule returns every consumer's slot, in start order.
func (r Resolved) Schedule() []Slot {
	s := make([]Slot, r.Consumers)
	for i := range s {
		s[i] = r.Slot(i)
	}
	return s
}

// Duration is how long the run lasts: lead_in + 2·N·t_c, when the last
// consumer's t_f passes. The fill preset has no schedule and reports 0.
func (r Resolved) Duration() time.Duration {
	if r.Shape() == ShapeFill {
		return 0
	}
	return r.Slot(r.Consumers - 1).End
}

// OverrunGrace is how long past its t_f a consumer on the host's own swap
// may take to finish its last cycle. Lateness within it is what the paper
// records; beyond it the consumer is stuck, not late.
const OverrunGrace = 60 * time.Second

// Grace is how long past the plan the master waits for a timed run's last
// cycles: OverrunGrace, or on an emulated swap device the time the device
// takes to read every consumer's region back once at its read limits (a
// cycle there can last that long and still be progressing: at 120 reads a
// second, 25 consumers of 100 MB share 5 swap-ins a second each), but never
// so long that the run would pass MaxRunDuration.
func (r Resolved) Grace() time.Duration {
	g := max(OverrunGrace, r.SwapDevice.ReadTime(int64(r.Consumers)*r.SizeBytes))
	return max(OverrunGrace, min(g, MaxRunDuration-r.Duration()))
}

// Deadline is how long the master lets a run last: a timed run its plan
// (the master adds a grace for the last cycles); a fill run, or a run of
// fixed work (Cycles), MaxRunDuration, whatever the plan says.
func (r Resolved) Deadline() time.Duration {
	if r.Shape() != ShapeTimed {
		return MaxRunDuration
	}
	return r.Duration()
}

// ActiveAt is how many consumers the plan has active at offset t.
func (r Resolved) ActiveAt(t time.Duration) int {
	n := 0
	for i := range r.Consumers {
		s := r.Slot(i)
		if t >= s.Start && t < s.End {
			n++
		}
	}
	return n
}

// Plateau is when every consumer is active at once, [lead_in + (N-1)·t_c,
// lead_in + (N+1)·t_c]: the paper's [730 s, 790 s] for N = 25, t_c = 30 s.
func (r Resolved) Plateau() (from, to time.Duration) {
	return r.Slot(r.Consumers - 1).Start, r.Slot(0).End
}

// Onset is the first moment the planned demand exceeds the memory limit,
// and false when it never does.
func (r Resolved) Onset() (time.Duration, bool) {
	if r.Shape() == ShapeFill || r.SizeBytes <= 0 {
		return 0, false
	}
	k := r.MemoryLimitBytes/r.SizeBytes + 1 // consumers whose sum passes the limit
	if k > int64(r.Consumers) {
		return 0, false
	}
	return r.Slot(int(k) - 1).Start, true
}
