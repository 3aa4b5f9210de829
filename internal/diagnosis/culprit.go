package diagnosis

import (
	"path"
	"strings"
	"time"
)

// Point is a group's charge at one moment.
type Point struct {
	At    time.Time
	Bytes int64
}

// Culprit is the group that grew into the memory a shared limit's victim
// lost: by how much, from when to when.
type Culprit struct {
	Group       string    `json:"group"`
	GrewBytes   int64     `json:"grew_bytes"`
	From        time.Time `json:"from"`
	To          time.Time `json:"to"`
	ChargeBytes int64     `json:"charge_bytes"`
}

// culpritShare is the least growth, as a share of the shared limit, that
// names a culprit: below it, the siblings' charges moved by no more than
// their own churn, and no one took the victim's memory.
const culpritShare = 0.05

// Growth is a group's charge over the charges' history: its lowest point
// before its last reading (the first, if it fell to the same low twice),
// and its last. N is how many readings it has; with one, Low is Last.
type Growth struct {
	Low, Last Point
	N         int
}

// GrowthOf summarises each group's charges, by its clean path, once a
// sample for every diagnosis that weighs them (25 thrashing groups under
// one shared limit each scanned every sibling's 5 minutes of points
// otherwise).
func GrowthOf(charges map[string][]Point) map[string]Growth {
	out := make(map[string]Growth, len(charges))
	for g, ps := range charges {
		if len(ps) == 0 {
			continue
		}
		low := ps[0]
		for _, p := range ps[:len(ps)-1] {
			if p.Bytes < low.Bytes {
				low = p
			}
		}
		out[clean(g)] = Growth{Low: low, Last: ps[len(ps)-1], N: len(ps)}
	}
	return out
}

// CulpritOf is, under the shared limit l, the group other than the victim
// (and not one of the victim's ancestors or descendants) whose charge grew
// the most over the charges' history, from its lowest point before its
// last reading; none when no group grew by culpritShare of the limit. The
// host's limit is shared by every workload, an ancestor's by the groups
// under it.
func CulpritOf(l Limit, victim string, growth map[string]Growth) (Culprit, bool) {
	if l.Kind != LimitAncestor && l.Kind != LimitHost {
		return Culprit{}, false
	}
	var best Culprit
	found := false
	victim, shared := clean(victim), clean(l.Group)
	for g, gr := range growth {
		// g is clean (GrowthOf).
		if gr.N < 2 || (l.Kind != LimitHost && !isUnder(g, shared)) || g == victim || isUnder(g, victim) || isUnder(victim, g) {
			continue
		}
		grew := gr.Last.Bytes - gr.Low.Bytes
		if float64(grew) < culpritShare*float64(l.Bytes) || (found && grew <= best.GrewBytes) {
			continue
		}
		best, found = Culprit{Group: g, GrewBytes: grew, From: gr.Low.At, To: gr.Last.At, ChargeBytes: gr.Last.Bytes}, true
	}
	return best, found
}

// under: g is strictly below parent.
func under(g, parent string) bool { return isUnder(clean(g), clean(parent)) }

// isUnder is under of two clean paths: it runs for every group of every
// thrashing workload each tick.
func isUnder(g, parent string) bool {
	p := strings.TrimSuffix(parent, "/")
	return len(g) > len(p) && g[len(p)] == '/' && g[:len(p)] == p && g != parent
}

// clean is path.Clean("/"+p), without its allocation for a path that is
// already clean, as the cgroup paths the stage reads are.
func clean(p string) string {
	if p == "/" || (strings.HasPrefix(p, "/") && !strings.HasSuffix(p, "/") && !strings.Contains(p, "//") && !strings.Contains(p, "/.")) {
		return p
	}
	return path.Clean("/" + p)
}
