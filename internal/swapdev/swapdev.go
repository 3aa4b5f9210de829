// Package swapdev is a run's emulated swap device: a named profile (the
// papers' 7,200 rpm disk, a cloud volume) or explicit limits in I/Os and
// bytes a second each way, and the host's swap devices it is applied to.
// Package master applies it with the kernel's own I/O throttle on the run's
// cgroup (cgroup v2 io.max, or the v1 blkio controller's
// blkio.throttle.*_device), keyed on the block devices under the active
// swap areas; the run record says what was emulated.
package swapdev

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// Profile names. Custom is a spec's explicit limits.
const (
	None    = "none"
	HDD2013 = "hdd-2013"
	Cloud   = "cloud-3000"
	Custom  = "custom"
)

// Limits are I/Os and bytes a second, each way; 0 is no limit.
type Limits struct {
	ReadIOPS  uint64 `json:"read_iops,omitempty"`
	WriteIOPS uint64 `json:"write_iops,omitempty"`
	ReadBPS   uint64 `json:"read_bps,omitempty"`
	WriteBPS  uint64 `json:"write_bps,omitempty"`
}

// The kernel's bounds: blk-throttle keeps an I/O limit in an unsigned int
// and a byte limit in a u64, and reads their largest value as "no limit";
// 0 removes a limit on cgroup v1. A limit is 1 up to one below those.
const (
	MaxIOPS = math.MaxUint32 - 1
	MaxBPS  = math.MaxInt64 // JSON numbers past it lose precision anyway
)

// Profile is a named device.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Limits
}

// Profiles lists the named devices, none first.
func Profiles() []Profile {
	return []Profile{
		{Name: None, Description: "The host's swap as it is: no throttle."},
		{Name: HDD2013, Description: "Maziero et al. (2013)'s 7,200 rpm IDE disk: an 8.5 ms seek, about 120 random I/Os a second each way.",
			Limits: Limits{ReadIOPS: 120, WriteIOPS: 120}},
		{Name: Cloud, Description: "A general-purpose cloud volume's baseline: 3,000 I/Os and 125 MiB a second each way.",
			Limits: Limits{ReadIOPS: 3000, WriteIOPS: 3000, ReadBPS: 125 << 20, WriteBPS: 125 << 20}},
	}
}

// Names lists the profile names, for messages.
func Names() []string {
	var names []string
	for _, p := range Profiles() {
		names = append(names, p.Name)
	}
	return names
}

func profile(name string) (Profile, bool) {
	ps := Profiles()
	i := slices.IndexFunc(ps, func(p Profile) bool { return p.Name == name })
	if i < 0 {
		return Profile{}, false
	}
	return ps[i], true
}

// Spec is a run's swap device as resolved: its profile's name (Custom for
// explicit limits) and its limits. In a run spec it is a profile's name
// ("hdd-2013") or an object of limits ({"read_iops":200}), which may name
// the profile they start from ({"profile":"hdd-2013","read_iops":200} is
// custom). The zero Spec is none.
type Spec struct {
	Profile string `json:"profile"`
	Limits
}

// Named is the spec of a profile.
func Named(name string) (Spec, error) {
	p, ok := profile(name)
	if !ok || name == Custom {
		return Spec{}, fmt.Errorf("%q is not a device profile; want one of %s, or explicit limits (%s)", strictjson.Clip(name), strings.Join(Names(), ", "), strings.Join(limitFields, ", "))
	}
	return Spec{Profile: p.Name, Limits: p.Limits}, nil
}

// ReadTime is how long the device takes to read n bytes in pages, one
// page an I/O, at its read limits; 0 when it has none.
func (l Limits) ReadTime(n int64) time.Duration {
	var secs float64
	if l.ReadIOPS > 0 {
		secs = float64((n+pageSize-1)/pageSize) / float64(l.ReadIOPS)
	}
	if l.ReadBPS > 0 {
		secs = max(secs, float64(n)/float64(l.ReadBPS))
	}
	return time.Duration(secs * float64(time.Second))
}

// pageSize is what one swap-in reads.
const pageSize = 4096

// IsNone says the run keeps the host's swap as it is.
func (s Spec) IsNone() bool { return s.Profile == "" || s.Profile == None }

// limitFields are the JSON names of Limits, in the order messages list them.
var limitFields = []string{"read_iops", "write_iops", "read_bps", "write_bps"}

func (l *Limits) field(name string) *uint64 {
	switch name {
	case "read_iops":
		return &l.ReadIOPS
	case "write_iops":
		return &l.WriteIOPS
	case "read_bps":
		return &l.ReadBPS
	case "write_bps":
		return &l.WriteBPS
	}
	return nil
}

func bound(name string) uint64 {
	if strings.HasSuffix(name, "_iops") {
		return MaxIOPS
	}
	return MaxBPS
}

// MarshalJSON writes the zero Spec as none.
func (s Spec) MarshalJSON() ([]byte, error) {
	if s.Profile == "" {
		s.Profile = None
	}
	type plain Spec // without these methods
	return json.Marshal(plain(s))
}

// UnmarshalJSON reads a profile's name or an object of limits, strictly:
// every error names the member and what it wants.
func (s *Spec) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var name string
		if err := json.Unmarshal(b, &name); err != nil {
			return err
		}
		v, err := Named(name)
		if err != nil {
			return err
		}
		*s = v
		return nil
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return errors.New(`want a profile's name such as "hdd-2013", or an object of limits such as {"read_iops":200,"write_iops":200}`)
	}
	values := map[string]uint64{}
	base := Spec{Profile: Custom}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		raw := fields[name]
		if name == "profile" {
			v, err := profileMember(raw)
			if err != nil {
				return err
			}
			if v != nil {
				base = *v
			}
			continue
		}
		if !slices.Contains(limitFields, name) {
			return fmt.Errorf("%s: unknown member; a device takes profile, %s", strictjson.Clip(name), strings.Join(limitFields, ", "))
		}
		v, err := limit(name, raw)
		if err != nil {
			return err
		}
		values[name] = v
	}
	if base.Profile == None && len(values) > 0 {
		return errors.New("profile none takes no limits: leave them out, or name another profile")
	}
	if base.Profile == Custom && len(values) == 0 {
		return fmt.Errorf("want at least one of %s, or a profile", strings.Join(limitFields, ", "))
	}
	out := base
	for name, v := range values {
		*out.field(name) = v
	}
	if named, ok := profile(base.Profile); ok && out.Limits != named.Limits {
		out.Profile = Custom
	}
	*s = out
	return nil
}

// profileMember reads an object's profile member: the named profile's
// spec, nil for custom (the limits given are all there is).
func profileMember(raw json.RawMessage) (*Spec, error) {
	var p string
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, errors.New("profile: want a profile's name")
	}
	if p == Custom {
		return nil, nil
	}
	if p == "" {
		p = None // the zero Spec
	}
	v, err := Named(p)
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	return &v, nil
}

// limit reads one limit: a whole number from 1 to the kernel's bound.
func limit(name string, raw json.RawMessage) (uint64, error) {
	var n json.Number
	// json.Number takes a quoted number too; a limit is a JSON number.
	if err := json.Unmarshal(raw, &n); err != nil || bytes.HasPrefix(raw, []byte(`"`)) {
		return 0, fmt.Errorf("%s: want a whole number from 1 to %d, got %s", name, bound(name), strictjson.Clip(string(raw)))
	}
	return parseLimit(name, n.String())
}

func parseLimit(name, text string) (uint64, error) {
	max := bound(name)
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil || v < 1 || uint64(v) > max {
		what := "I/Os a second"
		if strings.HasSuffix(name, "_bps") {
			what = "bytes a second"
		}
		return 0, fmt.Errorf("%s: %s: want a whole number of %s from 1 to %d (0 or less is no device; leave the limit out for none)", name, strictjson.Clip(text), what, max)
	}
	return uint64(v), nil
}

// Parse reads loadgen run's --swap-device: a profile's name, or limits as
// read_iops=200,write_iops=200.
func Parse(text string) (Spec, error) {
	if !strings.Contains(text, "=") {
		return Named(text)
	}
	s := Spec{Profile: Custom}
	seen := map[string]bool{}
	for pair := range strings.SplitSeq(text, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(pair), "=")
		f := s.field(name)
		if f == nil {
			return Spec{}, fmt.Errorf("%s: unknown limit; want %s", strictjson.Clip(name), strings.Join(limitFields, ", "))
		}
		// As the API refuses a duplicate key: which of two was meant?
		if seen[name] {
			return Spec{}, fmt.Errorf("%s given twice: give each limit once", name)
		}
		seen[name] = true
		v, err := parseLimit(name, value)
		if err != nil {
			return Spec{}, err
		}
		*f = v
	}
	return s, nil
}

// Validate checks a spec read back from a record.
func (s Spec) Validate() error {
	if s.IsNone() {
		if s.Limits != (Limits{}) {
			return errors.New("profile none with limits")
		}
		return nil
	}
	if _, ok := profile(s.Profile); !ok && s.Profile != Custom {
		return fmt.Errorf("profile %q: want one of %s, or custom", strictjson.Clip(s.Profile), strings.Join(Names(), ", "))
	}
	if s.Limits == (Limits{}) {
		return fmt.Errorf("profile %s without a limit", s.Profile)
	}
	for _, name := range limitFields {
		if v := *s.field(name); v > bound(name) {
			return fmt.Errorf("%s %d: past the kernel's %d", name, v, bound(name))
		}
	}
	return nil
}

// String is the device as the report and the live page name it:
// "hdd-2013 (120 read and 120 write I/Os a second)".
func (s Spec) String() string {
	if s.IsNone() {
		return None
	}
	var parts []string
	for _, p := range []struct {
		v    uint64
		unit string
	}{{s.ReadIOPS, "read I/Os"}, {s.WriteIOPS, "write I/Os"}, {s.ReadBPS, "read bytes"}, {s.WriteBPS, "write bytes"}} {
		if p.v > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.v, p.unit))
		}
	}
	return s.Profile + " (" + strings.Join(parts, ", ") + " a second)"
}
