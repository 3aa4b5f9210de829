package diagnosis

import (
	"fmt"
	"time"
)

// Action is what a remedy does.
type Action string

const (
	// ActionRaiseLimit: raise the binding limit to Bytes.
	ActionRaiseLimit Action = "raise-limit"
	// ActionLimitCulprit: stop, move or limit the group that grew.
	ActionLimitCulprit Action = "limit-culprit"
	// ActionAddMemory: the host's memory binds: add memory, or move a
	// workload to another host.
	ActionAddMemory Action = "add-memory"
	// ActionCompressedSwap: swap to a compressed pool (zram, zswap).
	ActionCompressedSwap Action = "compressed-swap"
	// ActionFasterDevice: a faster swap device.
	ActionFasterDevice Action = "faster-device"
	// ActionWait: demand is falling; the thrash ends by itself.
	ActionWait Action = "wait"
)

// Confidence is how sure a remedy's expected effect is.
type Confidence string

const (
	High   Confidence = "high"
	Medium Confidence = "medium"
	Low    Confidence = "low"
)

// Remedy is one thing an operator could do, what it would do, and how sure
// that is.
type Remedy struct {
	Action Action `json:"action"`
	// Target is the group it acts on (empty for the host), and Bytes the
	// size it sets, where it sets one.
	Target     string     `json:"target,omitempty"`
	Bytes      int64      `json:"bytes,omitempty"`
	Effect     string     `json:"effect"`
	Confidence Confidence `json:"confidence"`
}

// Useless is a remedy considered and ruled out, and why: a faster device
// when the device is idle, compressed swap for pages that do not compress.
type Useless struct {
	Action Action `json:"action"`
	Why    string `json:"why"`
}

// Trend is how what the group holds in memory and swap moved over the last
// samples.
type Trend struct {
	// FellBytes is how much it fell over Over (negative: it
	// grew).
	FellBytes int64
	Over      time.Duration
}

// fallingShare is how much of the shortfall's top the group must have
// shed, of what it holds in memory and swap, for waiting to be a remedy: a
// demand on its way back under the limit.
const fallingShare = 0.5

// minCompressRatio is the least compression ratio at which compressed swap
// helps: below it, a pool holds little more than the memory it takes.
const minCompressRatio = 2.0

// Context is what the remedies weigh beside the limit and the shortfall.
type Context struct {
	Kind     Kind
	Evidence Evidence
	Culprit  *Culprit
	Trend    Trend
	// CompressRatio is a sample of the group's pages' compression ratio;
	// 0 when not sampled.
	CompressRatio float64
	// NoSwap: the group may not swap (a memory.swap.max of 0 over it).
	NoSwap bool
}

// mib rounds a size up to whole MiB, as an operator sets a limit.
func mib(b int64) int64 { return (b + 1<<20 - 1) &^ (1<<20 - 1) }

// Remedies ranks what would end the thrash, most effective first, and
// names what would not.
func Remedies(l Limit, s Shortfall, c Context) ([]Remedy, []Useless) {
	var rs []Remedy
	var no []Useless
	// A dip within the kernel's reclaim margin under the limit is the
	// limit's own churn (a page-cache thrash's charge moves so at its
	// limit), not demand going away.
	fell := float64(c.Trend.FellBytes) > bindingMargin*float64(l.Bytes)
	if s.HighBytes == 0 && fell {
		// The working set fits the limit again after what it holds
		// fell: what is left is pages coming back, and nothing to
		// change.
		return []Remedy{{Action: ActionWait, Confidence: Medium,
			Effect: "its working set fits the limit again: the thrash is ending as its pages come back"}}, nil
	}
	// Held to the interval's top, all it holds less the room: the point
	// reads 0 when the demand reads low under a heavy thrash, and any
	// dip in what it holds would then pass for a falling demand.
	if fell && float64(c.Trend.FellBytes) >= fallingShare*float64(s.HighBytes) {
		rs = append(rs, Remedy{Action: ActionWait, Confidence: Medium,
			Effect: fmt.Sprintf("what it holds fell %s in %s: at that pace it fits again in %s", size(c.Trend.FellBytes), c.Trend.Over.Round(time.Second), eta(s.Bytes, c.Trend))})
	}
	if c.Culprit != nil {
		conf := Medium
		if c.Culprit.GrewBytes >= s.HighBytes {
			conf = High
		}
		rs = append(rs, Remedy{Action: ActionLimitCulprit, Target: c.Culprit.Group, Confidence: conf,
			Effect: fmt.Sprintf("frees the %s it grew by since %s, against a shortfall of %s", size(c.Culprit.GrewBytes), c.Culprit.From.Format(time.TimeOnly), size(s.Bytes))})
	}
	if l.Kind == LimitHost {
		rs = append(rs, Remedy{Action: ActionAddMemory, Bytes: mib(s.HighBytes), Confidence: Medium,
			Effect: fmt.Sprintf("the host needs about %s more memory, or a workload of that size moved elsewhere", size(s.Bytes))})
	} else {
		rs = append(rs, raiseLimit(l, s))
	}
	// The culprit first when what it took covers the shortfall, as far as
	// the estimate tells: its interval's low end (neighbour, bench/
	// diagnosis: the neighbour took 100 MiB, its growth read 92 MiB, the
	// shortfall's point 109 MiB).
	if c.Culprit != nil && c.Culprit.GrewBytes < s.LowBytes {
		for i, r := range rs {
			if r.Action == ActionLimitCulprit && i+1 < len(rs) {
				rs[i], rs[i+1] = rs[i+1], rs[i]
				break
			}
		}
	}
	rs, no = compressedSwap(rs, no, c)
	rs, no = fasterDevice(rs, no, c)
	return rs, no
}

// raiseLimit is the remedy that raises the binding limit l to hold the
// working set with the kernel's reclaim margin.
func raiseLimit(l Limit, s Shortfall) Remedy {
	conf := High
	if s.HighBytes > 2*s.LowBytes+64<<20 {
		conf = Medium // a wide interval: the working set was not well measured
	}
	// The kernel reclaims a little under a limit (bindingMargin): a
	// limit the working set only just fits still pages it, and a run
	// raised to exactly all it held (401 MiB) thrashed again.
	to := mib(int64(float64(l.Bytes+s.HighBytes) / (1 - bindingMargin)))
	effect := fmt.Sprintf("%s from %s to %s holds the working set (about %s more, %s to %s) with the kernel's reclaim margin", l.File, size(l.Bytes), size(to), size(s.Bytes), size(s.LowBytes), size(s.HighBytes))
	if s.HighBytes == 0 {
		// All it holds fits, and has not been falling: it thrashes
		// in the margin the kernel reclaims in under a limit.
		conf = Medium
		effect = fmt.Sprintf("all it holds fits %s only just, and the kernel reclaims within %.0f %% of a limit: %s from %s to %s leaves it that margin", l.File, 100*bindingMargin, l.File, size(l.Bytes), size(to))
	}
	return Remedy{Action: ActionRaiseLimit, Target: l.Group, Bytes: to, Confidence: conf, Effect: effect}
}

func compressedSwap(rs []Remedy, no []Useless, c Context) ([]Remedy, []Useless) {
	switch {
	case c.Kind == KindFile:
		return rs, append(no, Useless{ActionCompressedSwap, "a page-cache thrash: the pages it lacks are files, which swap does not hold"})
	case c.NoSwap:
		return rs, append(no, Useless{ActionCompressedSwap, "it may not swap: memory.swap.max is 0 over it (Kubernetes' LimitedSwap gives Guaranteed and BestEffort pods none)"})
	case c.Kind == KindCompressedPool:
		return rs, append(no, Useless{ActionCompressedSwap, fmt.Sprintf("the compressed pool is already %.0f %% full", c.Evidence.PoolFullPercent)})
	case c.CompressRatio == 0:
		return rs, no // not sampled: nothing to say
	case c.CompressRatio < minCompressRatio:
		return rs, append(no, Useless{ActionCompressedSwap, fmt.Sprintf("its pages compress only %.1f:1", c.CompressRatio)})
	}
	return append(rs, Remedy{Action: ActionCompressedSwap, Confidence: Medium,
		Effect: fmt.Sprintf("its pages compress %.1f:1: swap-ins from memory instead of the device", c.CompressRatio)}), no
}

func fasterDevice(rs []Remedy, no []Useless, c Context) ([]Remedy, []Useless) {
	switch {
	case c.Kind == KindDevice:
		return append(rs, Remedy{Action: ActionFasterDevice, Confidence: Low,
			Effect: c.Evidence.ceiling() + " and no memory limit binds: faster swap-ins shorten each stall"}), no
	case c.Kind != KindFile && atTheCeiling(c.Evidence):
		return append(rs, Remedy{Action: ActionFasterDevice, Confidence: Low,
			Effect: c.Evidence.ceiling() + ": faster swap-ins shorten each stall, but the memory is still short"}), no
	case c.Evidence.DeviceBusyPercent >= 0 && c.Kind != KindFile:
		return rs, append(no, Useless{ActionFasterDevice, fmt.Sprintf("%s is only %.0f %% busy: it is not the bottleneck", swapDisk(c.Evidence), c.Evidence.DeviceBusyPercent)})
	}
	return rs, no
}

// swapDisk names the busiest swap disk.
func swapDisk(e Evidence) string {
	if e.Device != "" {
		return "the swap disk " + e.Device
	}
	return "the swap disk"
}

// eta is when a falling demand fits again at its pace.
func eta(short int64, t Trend) time.Duration {
	if t.FellBytes <= 0 || t.Over <= 0 {
		return 0
	}
	return (time.Duration(float64(short) / float64(t.FellBytes) * float64(t.Over))).Round(time.Second)
}

// size is a byte count as an operator reads it.
func size(b int64) string {
	switch {
	case b >= 10<<30:
		return fmt.Sprintf("%.0f GiB", float64(b)/(1<<30))
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	default:
		return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
	}
}
