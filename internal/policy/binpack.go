package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

func init() {
	register(Registration{Name: "binpack", Summary: "round-robin bins that fit, the rest frozen and paged out",
		Needs: Needs{Ticks: true, Freezer: true, OwnMemory: true}, New: func() Policy { return NewBinPack(DefaultBinPack()) },
		Gauges: []Gauge{
			{Name: "bin", Help: "binpack: the bin running now, from 1; 0 while every consumer fits and none is held."},
			{Name: "bins", Help: "binpack: the number of bins; 0 while every consumer fits."},
		}})
}

// BinPackConfig holds the medium-term scheduler's parameters (Reuven and
// Wiseman, 2006).
type BinPackConfig struct {
	// Usable is the share of the run's limit a bin may fill (their 96 MB
	// bins in 128 MB of RAM: 0.75).
	Usable float64
	// Quantum is a full bin's time slice; a bin's slice is the quantum
	// times its fill, and at least half the quantum (their 0.5-1 s).
	Quantum time.Duration
}

// DefaultBinPack is the paper's: 0.75 of memory a bin, 1 s slices.
func DefaultBinPack() BinPackConfig { return BinPackConfig{Usable: 0.75, Quantum: time.Second} }

// Pack splits consumers into bins that each fit in capacity bytes: as many
// bins as the total needs (ceil(total / capacity)), first fit over the
// consumers by size, largest first; one that fits in no bin goes to the
// least filled. Bins hold consumer indexes; empty bins are dropped.
func Pack(cs []Consumer, capacity int64) [][]int {
	if len(cs) == 0 || capacity <= 0 {
		return nil
	}
	var total int64
	for _, c := range cs {
		total += c.Size()
	}
	n := max(1, int((total+capacity-1)/capacity))
	sorted := slices.Clone(cs)
	slices.SortStableFunc(sorted, func(a, b Consumer) int {
		return cmp.Or(cmp.Compare(b.Size(), a.Size()), cmp.Compare(a.Index, b.Index))
	})
	bins := make([][]int, n)
	fill := make([]int64, n)
	for _, c := range sorted {
		i := slices.IndexFunc(fill, func(f int64) bool { return f+c.Size() <= capacity })
		if i < 0 {
			i = slices.Index(fill, slices.Min(fill)) // the leftover: the least filled bin
		}
		bins[i] = append(bins[i], c.Index)
		fill[i] += c.Size()
	}
	return slices.DeleteFunc(bins, func(b []int) bool { return len(b) == 0 })
}

// binPack round-robins the bins: the current bin runs, every other bin is
// frozen (and paged out by the run as it goes). The bins are packed anew
// at each round, so a consumer that started meanwhile joins then, and
// runs until it does. While everything fits, nothing is held.
type binPack struct {
	cfg      BinPackConfig
	bins     [][]int
	current  int
	switchAt time.Time
	frozen   map[int]bool
}

// NewBinPack returns the medium-term scheduler with cfg.
func NewBinPack(cfg BinPackConfig) Policy { return &binPack{cfg: cfg, frozen: map[int]bool{}} }

func (p *binPack) Step(t Tick) []Action {
	capacity := int64(p.cfg.Usable * float64(t.LimitBytes))
	var total int64
	active := map[int]bool{}
	for _, c := range t.Consumers {
		total += c.Size()
		active[c.Index] = true
	}
	for i := range p.frozen {
		if !active[i] {
			delete(p.frozen, i) // it ended
		}
	}
	if total <= capacity {
		p.bins = nil
		return p.runOnly(nil, active, "everything fits in one bin")
	}
	switch {
	case p.bins == nil:
		p.bins, p.current = Pack(t.Consumers, capacity), 0
	case !t.Now.Before(p.switchAt):
		if p.current++; p.current >= len(p.bins) {
			p.bins, p.current = Pack(t.Consumers, capacity), 0
		}
	default:
		return nil
	}
	bin := p.bins[p.current]
	var size int64
	for _, i := range bin {
		if c, ok := find(t.Consumers, i); ok {
			size += c.Size()
		}
	}
	fill := min(float64(size)/float64(capacity), 1)
	slice := max(time.Duration(fill*float64(p.cfg.Quantum)), p.cfg.Quantum/2)
	p.switchAt = t.Now.Add(slice)
	return p.runOnly(bin, active, fmt.Sprintf("bin %d of %d (%.0f %% full) for %s", p.current+1, len(p.bins), 100*fill, slice.Round(time.Millisecond)))
}

// Gauges are binpack's bin running now (1-based) and its number of bins;
// both 0 while nothing is held.
func (p *binPack) Gauges() map[string]float64 {
	bin, bins := p.Bin()
	return map[string]float64{"bin": float64(bin), "bins": float64(bins)}
}

// State says which bin runs, while consumers are held in bins.
func (p *binPack) State() string {
	bin, bins := p.Bin()
	if bins == 0 {
		return ""
	}
	return fmt.Sprintf("bin %d of %d running", bin, bins)
}

// Bin is the running bin, 1-based, of bins; 0 and 0 while nothing is held.
func (p *binPack) Bin() (int, int) {
	if p.bins == nil {
		return 0, 0
	}
	return p.current + 1, len(p.bins)
}

// runOnly thaws the consumers of bin and freezes every other active one
// packed into a bin; with a nil bin it thaws everything.
func (p *binPack) runOnly(bin []int, active map[int]bool, why string) []Action {
	var out []Action
	run := map[int]bool{}
	for _, i := range bin {
		run[i] = true
	}
	held := map[int]bool{}
	if bin != nil {
		for _, b := range p.bins {
			for _, i := range b {
				held[i] = !run[i]
			}
		}
	}
	for _, i := range slices.Sorted(maps.Keys(p.frozen)) {
		if !held[i] {
			out = append(out, Action{Kind: Thaw, Consumer: i, Why: why})
			delete(p.frozen, i)
		}
	}
	for _, b := range p.bins {
		for _, i := range b {
			if held[i] && active[i] && !p.frozen[i] {
				out = append(out, Action{Kind: Freeze, Consumer: i, Why: "out of " + why})
				p.frozen[i] = true
			}
		}
	}
	return out
}
