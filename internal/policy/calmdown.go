package policy

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

func init() {
	register(Registration{Name: "calmdown", Summary: "stop the newest consumer for 20 s while memory is low and paging high",
		Needs: Needs{Ticks: true, Freezer: true}, New: func() Policy { return NewCalmDown(DefaultCalmDown()) }})
}

// CalmDownConfig holds the FreeBSD rule's parameters as Maziero et al.
// (2013) describe it.
type CalmDownConfig struct {
	// FreeLow: memory is low while the run cgroup's free memory is below
	// this share of its limit.
	FreeLow float64
	// FaultHigh: paging is high while the consumers' swap-ins add up to
	// more than this many a second.
	FaultHigh float64
	// Hold is how long a stopped consumer stays out (FreeBSD: 20 s).
	Hold time.Duration
}

// DefaultCalmDown: memory low below 1/16 of the limit free, paging high
// above 10 swap-ins a second (TPF's PF_High), 20 s out.
func DefaultCalmDown() CalmDownConfig {
	return CalmDownConfig{FreeLow: 1.0 / 16, FaultHigh: 10, Hold: 20 * time.Second}
}

// calmDown stops, while memory is low and paging is high, the most
// recently activated consumer still running (the run pages it out), one a
// tick, always leaving one running; a stopped consumer returns after Hold,
// or as soon as the pressure ends.
type calmDown struct {
	cfg     CalmDownConfig
	stopped map[int]time.Time
}

// NewCalmDown returns the calm-down rule with cfg.
func NewCalmDown(cfg CalmDownConfig) Policy { return &calmDown{cfg: cfg, stopped: map[int]time.Time{}} }

func (p *calmDown) Step(t Tick) []Action {
	var rate float64
	active := map[int]bool{}
	for _, c := range t.Consumers {
		rate += c.SwapInRate
		active[c.Index] = true
	}
	low := float64(t.FreeBytes) < p.cfg.FreeLow*float64(t.LimitBytes)
	pressure := low && rate > p.cfg.FaultHigh
	var out []Action
	for _, i := range slices.Sorted(maps.Keys(p.stopped)) {
		at := p.stopped[i]
		switch {
		case !active[i]:
			delete(p.stopped, i) // it ended
		case !t.Now.Before(at.Add(p.cfg.Hold)):
			out = append(out, Action{Kind: Thaw, Consumer: i, Why: fmt.Sprintf("out for %s", p.cfg.Hold)})
			delete(p.stopped, i)
		case !pressure:
			out = append(out, Action{Kind: Thaw, Consumer: i, Why: "the pressure ended"})
			delete(p.stopped, i)
		}
	}
	if !pressure || len(out) > 0 {
		return out
	}
	latest := -1
	var since time.Time
	running := 0
	for _, c := range t.Consumers {
		if _, ok := p.stopped[c.Index]; ok {
			continue
		}
		running++
		if latest < 0 || c.Since.After(since) || (c.Since.Equal(since) && c.Index > latest) {
			latest, since = c.Index, c.Since
		}
	}
	if running < 2 {
		return nil
	}
	p.stopped[latest] = t.Now
	return []Action{{Kind: Freeze, Consumer: latest, Why: fmt.Sprintf("free memory %d MiB below %.0f %% of the limit and %.0f swap-ins/s: the most recently activated", t.FreeBytes>>20, 100*p.cfg.FreeLow, rate)}}
}
