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

// CulpritOf is, under the shared limit l, the group other than the victim
// (and not one of the victim's ancestors or descendants) whose charge grew
// the most over the charges' history, from its lowest point before its
// last reading; none when no group grew by culpritShare of the limit. The
// host's limit is shared by every workload, an ancestor's by the groups
// under it.
func CulpritOf(l Limit, victim string, charges map[string][]Point) (Culprit, bool) {
	if l.Kind != LimitAncestor && l.Kind != LimitHost {
		return Culprit{}, false
	}
	var best Culprit
	found := false
	for g, ps := range charges {
		if !sharesLimit(l, g) || related(g, victim) || len(ps) < 2 {
			continue
		}
		last := ps[len(ps)-1]
		low := ps[0]
		for _, p := range ps[:len(ps)-1] {
			if p.Bytes < low.Bytes {
				low = p
			}
		}
		grew := last.Bytes - low.Bytes
		if float64(grew) < culpritShare*float64(l.Bytes) || (found && grew <= best.GrewBytes) {
			continue
		}
		best, found = Culprit{Group: g, GrewBytes: grew, From: low.At, To: last.At, ChargeBytes: last.Bytes}, true
	}
	return best, found
}

// sharesLimit: group g is under the group l is set on.
func sharesLimit(l Limit, g string) bool {
	return l.Kind == LimitHost || under(g, l.Group)
}

// under: g is strictly below parent. Both are cleaned only when they need
// it: it runs for every group of every thrashing workload each tick.
func under(g, parent string) bool {
	g, parent = clean(g), clean(parent)
	p := strings.TrimSuffix(parent, "/")
	return len(g) > len(p) && g[len(p)] == '/' && g[:len(p)] == p && g != parent
}

// related: one of a and b holds the other (or they are the same group).
func related(a, b string) bool {
	a, b = clean(a), clean(b)
	return a == b || under(a, b) || under(b, a)
}

// clean is path.Clean("/"+p), without its allocation for a path that is
// already clean, as the cgroup paths the stage reads are.
func clean(p string) string {
	if p == "/" || (strings.HasPrefix(p, "/") && !strings.HasSuffix(p, "/") && !strings.Contains(p, "//") && !strings.Contains(p, "/.")) {
		return p
	}
	return path.Clean("/" + p)
}
