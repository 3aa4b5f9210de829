package run

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// Preset is a named default spec with the source it reproduces. Each is
// registered by a file of its own (preset_*.go), the one place that knows
// it; everything else reads its spec and shape.
type Preset struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Spec        Resolved `json:"spec"`
	// Source is the paper or seed it reproduces, for help texts.
	Source string `json:"-"`
	// Shape is ShapeFill for a preset that fills chunks instead of running
	// a schedule; a scheduled preset is timed or of fixed work by its spec.
	Shape Shape `json:"-"`
}

var presets struct {
	sync.Mutex
	list []Preset
}

// registerPreset adds a preset; each preset_*.go calls it from init.
func registerPreset(p Preset) {
	presets.Lock()
	defer presets.Unlock()
	if p.Spec.Preset != p.Name {
		panic(fmt.Sprintf("preset %s: its spec names %q", p.Name, p.Spec.Preset))
	}
	if slices.ContainsFunc(presets.list, func(q Preset) bool { return q.Name == p.Name }) {
		panic("preset " + p.Name + " registered twice")
	}
	presets.list = append(presets.list, p)
	slices.SortFunc(presets.list, func(a, b Preset) int { return cmp.Compare(a.Name, b.Name) })
}

// Presets lists every preset, by name.
func Presets() []Preset {
	presets.Lock()
	defer presets.Unlock()
	return slices.Clone(presets.list)
}

// presetByName is the named preset.
func presetByName(name string) (Preset, bool) {
	presets.Lock()
	defer presets.Unlock()
	i := slices.IndexFunc(presets.list, func(p Preset) bool { return p.Name == name })
	if i < 0 {
		return Preset{}, false
	}
	return presets.list[i], true
}

// presetSpec is the named preset's spec.
func presetSpec(name string) (Resolved, bool) {
	p, ok := presetByName(name)
	return p.Spec, ok
}

// PresetNames lists the preset names, for messages and flags.
func PresetNames() []string {
	var names []string
	for _, p := range Presets() {
		names = append(names, p.Name)
	}
	return names
}

// PresetHelp lists the presets by their sources, for a flag's help:
// "e1, e2 (Maziero et al., 2013), … or syn8 (Reuven and Wiseman, 2006)".
func PresetHelp() string {
	var parts []string
	ps := Presets()
	for i, p := range ps {
		part := p.Name
		if i == len(ps)-1 || ps[i+1].Source != p.Source {
			part += " (" + p.Source + ")"
		}
		parts = append(parts, part)
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}

const (
	mb  = 1_000_000 // the papers' sizes are decimal megabytes
	mib = 1 << 20
	gib = 1 << 30
)

// paperSpec is Maziero et al. (2013)'s run, which the other presets vary:
// 25 consumers of 100 MB in 1 GiB, started t_c apart after a 10 s lead-in.
func paperSpec(name string, w int, sleep, interval time.Duration) Resolved {
	return Resolved{
		Preset: name, Consumers: 25, SizeBytes: 100 * mb, WritesPerCycle: w,
		Sleep: Duration(sleep), Interval: Duration(interval), LeadIn: Duration(10 * time.Second),
		MemoryLimitBytes: 1 * gib, Scale: 1, Backing: BackingAnon, Fill: FillRandom, Policy: policy.None,
		SwapDevice: swapdev.Spec{Profile: swapdev.None},
	}
}
