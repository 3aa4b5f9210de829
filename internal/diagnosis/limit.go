package diagnosis

import (
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
)

// LimitKind is which limit binds a thrashing group.
type LimitKind string

const (
	// LimitOwn is the group's own hard limit: memory.max (v1:
	// memory.limit_in_bytes).
	LimitOwn LimitKind = "own"
	// LimitHigh is the group's own memory.high, where the kernel throttles
	// and reclaims before the hard limit.
	LimitHigh LimitKind = "high"
	// LimitAncestor is a hard or high limit of a group above it, shared
	// with its siblings (a pod's, a slice's).
	LimitAncestor LimitKind = "ancestor"
	// LimitHost is the host's memory: no group's limit binds.
	LimitHost LimitKind = "host"
)

// Limit is one limit over a group: where it is set, what it is and how
// much of it is used.
type Limit struct {
	Kind LimitKind `json:"kind"`
	// Group is the cgroup path (from the hierarchy's root) whose file sets
	// it, and File the file; empty for the host.
	Group string `json:"group,omitempty"`
	File  string `json:"file,omitempty"`
	// Bytes is the limit, and UsedBytes what the group it is set on
	// charges against it (the host: its memory in use).
	Bytes     int64 `json:"bytes"`
	UsedBytes int64 `json:"used_bytes"`
}

// Headroom is the limit's room left, as a share of it.
func (l Limit) Headroom() float64 {
	if l.Bytes <= 0 {
		return math.Inf(1)
	}
	return float64(l.Bytes-l.UsedBytes) / float64(l.Bytes)
}

// Reader reads the file name in the directory dir whole (workload.Reader).
type Reader interface {
	ReadFileAt(dir, name string) ([]byte, error)
}

// Hierarchy is where a group's limits are read: the mount of the hierarchy
// that holds the memory controller, and whether it is cgroup v2.
type Hierarchy struct {
	Mount string
	V2    bool
}

// Limits reads every limit over group, its own first, then each
// ancestor's up to the hierarchy's root (which has none). An unset limit
// is left out; a file that cannot be read is an error naming it.
func (h Hierarchy) Limits(r Reader, group string) ([]Limit, error) {
	group = path.Clean("/" + group)
	if strings.Contains(group, "..") {
		return nil, fmt.Errorf("cgroup path %q climbs out of the hierarchy", group)
	}
	var out []Limit
	for g := group; g != "/"; g = path.Dir(g) {
		ls, err := h.limitsOf(r, g)
		if err != nil {
			return nil, err
		}
		for _, l := range ls {
			if g != group {
				l.Kind = LimitAncestor
			}
			out = append(out, l)
		}
	}
	return out, nil
}

// limitsOf reads the limits set on one group.
func (h Hierarchy) limitsOf(r Reader, g string) ([]Limit, error) {
	dir := h.Mount + g
	usedFile, files := "memory.usage_in_bytes", []string{"memory.limit_in_bytes"}
	if h.V2 {
		usedFile, files = "memory.current", []string{"memory.max", "memory.high"}
	}
	var out []Limit
	used := int64(-1)
	for _, f := range files {
		n, set, err := readLimit(r, dir, f)
		if err != nil {
			return nil, err
		}
		if !set {
			continue
		}
		if used < 0 {
			if used, err = readInt(r, dir, usedFile); err != nil {
				return nil, err
			}
		}
		kind := LimitOwn
		if f == "memory.high" {
			kind = LimitHigh
		}
		out = append(out, Limit{Kind: kind, Group: g, File: f, Bytes: n, UsedBytes: used})
	}
	return out, nil
}

// unlimitedV1 is where a v1 limit means none: the page-rounded LONG_MAX.
const unlimitedV1 = math.MaxInt64 &^ (1<<20 - 1)

// readLimit reads a limit file: "max" (v2) or a v1 value at its ceiling is
// no limit.
func readLimit(r Reader, dir, name string) (int64, bool, error) {
	b, err := r.ReadFileAt(dir, name)
	if err != nil {
		return 0, false, fmt.Errorf("reading %s/%s: %w", dir, name, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%s/%s: %q is not a byte count", dir, name, s)
	}
	return n, n < unlimitedV1, nil
}

func readInt(r Reader, dir, name string) (int64, error) {
	b, err := r.ReadFileAt(dir, name)
	if err != nil {
		return 0, fmt.Errorf("reading %s/%s: %w", dir, name, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s/%s: %q is not a byte count", dir, name, strings.TrimSpace(string(b)))
	}
	return n, nil
}

// Host is the host's memory as the diagnosis reads it (/proc/meminfo).
type Host struct {
	TotalBytes, AvailableBytes int64
}

// bindingMargin is how close to a limit a group's charge must be for the
// limit to bind: reclaim starts before the charge reaches it (the kernel's
// watermarks, and memory.high's reclaim on the way up), so a group
// reclaiming at its limit reads a little under it.
const bindingMargin = 0.03

// hostBinds is the share of the host's memory left available under which
// the host's memory binds: near the kernel's low watermarks, where kswapd
// and direct reclaim take pages from every group.
const hostBinds = 0.05

// ErrNoBindingLimit is a thrash under no limit near its use, on a host
// with memory left: the pressure is from elsewhere (a device, a burst).
var ErrNoBindingLimit = errors.New("no limit binds: every limit has room, and the host has memory available")

// Binding is the limit that binds: among the limits over the group whose
// charge is within bindingMargin of them, the one with the least room (the
// nearest to the group on a tie); else the host's, when little of its
// memory is available.
func Binding(limits []Limit, host Host) (Limit, error) {
	best := -1
	for i, l := range limits {
		if l.Headroom() > bindingMargin {
			continue
		}
		if best < 0 || l.Headroom() < limits[best].Headroom() {
			best = i
		}
	}
	if best >= 0 {
		return limits[best], nil
	}
	if host.TotalBytes > 0 && float64(host.AvailableBytes) < hostBinds*float64(host.TotalBytes) {
		return Limit{Kind: LimitHost, Bytes: host.TotalBytes, UsedBytes: host.TotalBytes - host.AvailableBytes}, nil
	}
	return Limit{}, ErrNoBindingLimit
}
