package settings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// Asked is the settings a run spec names, each with its JSON value, such as
// {"swap":"zram","page_cluster":0}. Decoding it checks every name and value.
type Asked map[string]json.RawMessage

// UnmarshalJSON reads a JSON object of settings, refusing an unknown name
// or a value the setting does not take.
func (a *Asked) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil || m == nil {
		return errors.New(`want a JSON object such as {"swap":"zram","page_cluster":0}`)
	}
	out := Asked{}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		s, ok := Lookup(name)
		if !ok {
			return fmt.Errorf("%q is not a setting; want %s", strictjson.Clip(name), strings.Join(Names(), ", "))
		}
		if _, err := s.Parse(m[name]); err != nil {
			return err
		}
		var c bytes.Buffer
		_ = json.Compact(&c, m[name])
		out[name] = c.Bytes()
	}
	*a = out
	return nil
}

// Value is the file's value for the named setting ("" when not asked).
func (a Asked) Value(name string) string {
	raw, ok := a[name]
	if !ok {
		return ""
	}
	s, _ := Lookup(name)
	v, _ := s.Parse(raw)
	return v
}

// HostWide names the asked settings that change the host, given whether
// the run's memory cgroup is on cgroup v2.
func (a Asked) HostWide(v2 bool) []string {
	var out []string
	for _, s := range Registered {
		if _, ok := a[s.Name]; ok && s.HostWide(v2) {
			out = append(out, s.Name)
		}
	}
	return out
}

// Label is the settings as one short line, in the registry's order, for a
// comparison's table ("swap=zram page_cluster=0"); "kernel's own" for none.
func (a Asked) Label() string {
	var parts []string
	for _, s := range Registered {
		if raw, ok := a[s.Name]; ok {
			parts = append(parts, s.Name+"="+strings.Trim(string(raw), `"`))
		}
	}
	if len(parts) == 0 {
		return "kernel's own"
	}
	return strings.Join(parts, " ")
}

// Check says whether a run may be put under the settings here: each
// host-wide one only with the operator's opt-in (allowHost), each one the
// kernel (under root, "" is /) has, a cgroup v2 file only where the run's
// memory cgroup is on v2. The error names the setting and the fix.
func (a Asked) Check(allowHost, v2 bool, root string) error {
	if host := a.HostWide(v2); len(host) > 0 && !allowHost {
		return fmt.Errorf("%s change the whole host, not only the run: the operator allows that by starting thrashscope with --settings.allow-host (they are journalled in "+DefaultStateDir+" and restored after the run)", strings.Join(host, ", "))
	}
	for _, s := range Registered {
		if _, ok := a[s.Name]; !ok {
			continue
		}
		if s.V2Only && !v2 {
			return fmt.Errorf("%s: the run's memory cgroup is on cgroup v1, which has no %s: it needs %s", s.Name, s.File, s.Config)
		}
		if err := s.Available(root); err != nil {
			return err
		}
		if s.check != nil {
			if err := s.check(root, a.Value(s.Name)); err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
		}
	}
	return nil
}
