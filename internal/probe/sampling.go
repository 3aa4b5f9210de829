package probe

import (
	"errors"
	"time"
)

// stallSampling runs the CPU-clock events behind memory_stall_sample. A
// stopped CPU-clock event sets no timer, so a host without memory stalls
// pays nothing for them; they start at the first read that sees a stall
// begin (or a major fault), and stop after the calm period without one. The
// on-CPU stall outside reclaim of the first interval of a stall, up to one
// sample interval, goes unsampled.
type stallSampling struct {
	calm      time.Duration
	events    *perfEvents // nil when the events could not be opened
	on        bool
	lastStall time.Time
	seen      uint64 // memory_stalls_seen at the last read
}

func (s *stallSampling) start(now time.Time) error {
	s.lastStall = now
	if s.events == nil || s.on {
		return nil
	}
	if err := s.events.setEnabled(true); err != nil {
		return errors.Join(err, s.events.setEnabled(false))
	}
	s.on = true
	return nil
}

func (s *stallSampling) stop() error {
	if s.events == nil || !s.on {
		return nil
	}
	s.on = false
	return s.events.setEnabled(false)
}

// update starts the samples when a stall began or a major fault happened
// since the last read, and stops them after the calm period without either.
func (p *Probe) updateSampling(now time.Time, stallsSeen uint64, majors bool) {
	s := &p.sampling
	active := stallsSeen > s.seen || majors
	s.seen = stallsSeen
	switch {
	case active:
		if err := s.start(now); err != nil {
			p.logger.Error("stall samples failed to start", "err", err)
		}
	case s.on && s.calm > 0 && now.Sub(s.lastStall) >= s.calm:
		if err := s.stop(); err != nil {
			p.logger.Error("stall samples failed to stop", "err", err)
		}
	}
}

// StallSampling reports whether stalls on CPU outside reclaim are being
// sampled right now.
func (p *Probe) StallSampling() bool { return p.sampling.on }
