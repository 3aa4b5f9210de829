package policy

import "fmt"

func init() {
	register(Registration{Name: "tpf", Summary: "protect the high-fault consumer closest to its demand",
		Needs: Needs{Ticks: true, Protection: true}, New: func() Policy { return NewTPF(DefaultTPF()) }})
}

// TPFConfig holds TPF's release thresholds (Jiang and Zhang, 2001). The
// protection starts when the detector is thrashing, whose thresholds are
// the detector's.
type TPFConfig struct {
	// PFLow: the protected consumer is released once its swap-ins fall
	// below this many a second (TPF: 1).
	PFLow float64
	// CPUHigh: or once CPU utilisation recovers past this share (TPF: 80).
	CPUHigh float64
}

// DefaultTPF is TPF's published thresholds.
func DefaultTPF() TPFConfig { return TPFConfig{PFLow: 1, CPUHigh: 80} }

// tpf protects, while the run thrashes, the high-fault consumer closest to
// its full working set, the one with the least (demand − RSS), so that one
// makes progress; at most one at a time.
type tpf struct {
	cfg       TPFConfig
	protected int // its index, -1 for none
}

// NewTPF returns TPF's protection with cfg.
func NewTPF(cfg TPFConfig) Policy { return &tpf{cfg: cfg, protected: -1} }

func (p *tpf) Step(t Tick) []Action {
	if p.protected >= 0 {
		c, ok := find(t.Consumers, p.protected)
		var why string
		switch {
		case !ok:
			why = "it ended"
		case c.SwapInRate < p.cfg.PFLow:
			why = fmt.Sprintf("its swap-ins fell to %.1f/s, below PF_Low %g", c.SwapInRate, p.cfg.PFLow)
		case t.CPUBusyPercent > p.cfg.CPUHigh:
			why = fmt.Sprintf("CPU utilisation recovered to %.0f %%, past CPU_High %g %%", t.CPUBusyPercent, p.cfg.CPUHigh)
		default:
			return nil
		}
		a := Action{Kind: Release, Consumer: p.protected, Why: why}
		p.protected = -1
		return []Action{a}
	}
	if !t.Thrashing {
		return nil
	}
	best, short := -1, int64(0)
	for _, c := range t.Consumers {
		if !c.HighFault {
			continue
		}
		if s := c.DemandBytes - c.ResidentBytes; best < 0 || s < short {
			best, short = c.Index, s
		}
	}
	if best < 0 {
		return nil
	}
	p.protected = best
	return []Action{{Kind: Protect, Consumer: best, Why: fmt.Sprintf("thrashing: the high-fault consumer with the least demand − RSS (%d MiB)", short>>20)}}
}

func find(cs []Consumer, index int) (Consumer, bool) {
	for _, c := range cs {
		if c.Index == index {
			return c, true
		}
	}
	return Consumer{}, false
}
