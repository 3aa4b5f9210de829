// Package run is the model of a run, which every layer may import: the spec
// and its presets (Maziero et al., 2013's experiments e1-e4, seed 002's
// progressive fill and seed 003's SYN8), the schedule, the safety budget,
// the record with its states, the live progress, and their errors. Package
// master carries a run out with the processes of package consumer; the
// observer watches what a run does and never depends on it.
package run

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/settings"
	"github.com/thrashscope/thrashscope/internal/strictjson"
	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// Backing and fill values.
const (
	BackingAnon = "anon"
	BackingFile = "file"
	FillRandom  = "random"
	FillZero    = "zero"
)

// Limits that make a spec absurd rather than merely unsafe here.
const (
	MaxConsumers   = 512
	MaxRunDuration = 4 * time.Hour
	MaxRepeats     = 20
	// MaxCycles bounds the work a consumer can be asked for; the run's
	// MaxRunDuration bounds its time whatever the work.
	MaxCycles      = 10_000_000
	MinSizeBytes   = 1 << 20 // below a MiB a consumer is mostly runtime
	MaxWrites      = 100_000_000
	MinMemoryLimit = 16 << 20
	// Upper bounds that keep every product and sum of a spec far from
	// int64's range: 512 consumers × 1 TiB, 2 × 512 × 4 h in nanoseconds.
	MaxSizeBytes   = 1 << 40 // 1 TiB a consumer
	MaxMemoryLimit = 1 << 46 // 64 TiB
)

// Duration is a time.Duration that reads and writes Go duration strings
// ("30s", "100ms") in JSON.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`want a Go duration string such as "100ms" or "30s"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a Go duration such as \"100ms\" or \"30s\"", strictjson.Clip(s))
	}
	*d = Duration(v)
	return nil
}

// Spec is a run spec, as POSTed to /api/v1/runs and as loadgen run's flags.
// Pointer fields are overrides: nil takes the preset's value. Resolve fills
// every field.
type Spec struct {
	Preset           string    `json:"preset"`
	Consumers        *int      `json:"consumers,omitempty"`
	SizeBytes        *int64    `json:"size_bytes,omitempty"`
	WritesPerCycle   *int      `json:"writes_per_cycle,omitempty"`
	Sleep            *Duration `json:"sleep,omitempty"`
	Interval         *Duration `json:"interval,omitempty"`
	LeadIn           *Duration `json:"lead_in,omitempty"`
	MemoryLimitBytes *int64    `json:"memory_limit_bytes,omitempty"`
	Scale            *float64  `json:"scale,omitempty"`
	Backing          *string   `json:"backing,omitempty"`
	Fill             *string   `json:"fill,omitempty"`
	// Repeats is the fill preset's number of repetitions (seed 002's 5).
	Repeats *int `json:"repeats,omitempty"`
	// Cycles is work instead of time: each consumer exits after this many
	// write cycles rather than at its t_f, so the run has a makespan and
	// each consumer a run time. 0: a timed run (the e-presets' default).
	Cycles *int64 `json:"cycles,omitempty"`
	// Policy is the thrash-control policy the run is put under, one of
	// package policy's registry; none (Linux as it is) by default.
	Policy *string `json:"policy,omitempty"`
	// SwapDevice is the swap device the run emulates: a profile's name
	// or explicit limits (package swapdev); none by default.
	SwapDevice *swapdev.Spec `json:"swap_device,omitempty"`
	// Settings are the kernel's memory settings the run is put under
	// (package settings), such as {"swap":"zram","page_cluster":0}; the
	// kernel's own by default.
	Settings settings.Asked `json:"settings,omitempty"`
}

// Resolved is a spec with every field filled: what a run actually does.
// For the fill preset, Consumers is the number of chunks and SizeBytes the
// chunk size, so the demand is Consumers × SizeBytes as for the others.
type Resolved struct {
	Preset           string   `json:"preset"`
	Consumers        int      `json:"consumers"`
	SizeBytes        int64    `json:"size_bytes"`
	WritesPerCycle   int      `json:"writes_per_cycle"`
	Sleep            Duration `json:"sleep"`
	Interval         Duration `json:"interval"`
	LeadIn           Duration `json:"lead_in"`
	MemoryLimitBytes int64    `json:"memory_limit_bytes"`
	Scale            float64  `json:"scale"`
	Backing          string   `json:"backing"`
	Fill             string   `json:"fill"`
	Repeats          int      `json:"repeats,omitempty"`
	// Cycles is each consumer's work in write cycles; 0 for a timed run.
	Cycles int64 `json:"cycles,omitempty"`
	// Policy is the thrash-control policy; "none" by default.
	Policy string `json:"policy,omitempty"`
	// SwapDevice is the emulated swap device; profile none by default.
	SwapDevice swapdev.Spec `json:"swap_device"`
	// Settings are the kernel's memory settings asked; none by default.
	Settings settings.Asked `json:"settings,omitempty"`
}

// FieldError is invalid input: the API answers it with 400.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// DecodeSpec reads a JSON run spec strictly: unknown fields, wrong types
// and trailing data are errors naming the field.
func DecodeSpec(b []byte) (Spec, error) {
	var s Spec
	if err := strictjson.Check(b); err != nil {
		return s, &FieldError{Field: "body", Msg: err.Error()}
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return s, &FieldError{Field: "body", Msg: `want a JSON object such as {"preset":"e4","scale":0.1}`}
	}
	if dec.More() {
		return s, &FieldError{Field: "body", Msg: "trailing data after the JSON run spec"}
	}
	known := specFields()
	// One field at a time, so each error names its field.
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if !known[name] {
			return s, &FieldError{Field: strictjson.Clip(name), Msg: "unknown field; a spec takes " + strings.Join(slices.Sorted(maps.Keys(known)), ", ")}
		}
		one, _ := json.Marshal(map[string]json.RawMessage{name: fields[name]})
		if err := json.Unmarshal(one, &s); err != nil {
			var ute *json.UnmarshalTypeError
			if errors.As(err, &ute) {
				return s, &FieldError{Field: name, Msg: fmt.Sprintf("want a %s, got a JSON %s", ute.Type, ute.Value)}
			}
			// The fields' own errors clip what they echo of the input:
			// clipping the message would cut the bound it explains.
			return s, &FieldError{Field: name, Msg: err.Error()}
		}
	}
	return s, nil
}

// specFields are the JSON names a Spec takes.
func specFields() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeFor[Spec]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		m[name] = true
	}
	return m
}

// Resolve fills a spec from its preset, applies the overrides and the scale,
// and validates the result. Every error is a *FieldError.
func Resolve(s Spec) (Resolved, error) {
	name := s.Preset
	if name == "" {
		return Resolved{}, &FieldError{Field: "preset", Msg: "required; one of " + strings.Join(PresetNames(), ", ")}
	}
	r, ok := presetSpec(name)
	if !ok {
		return Resolved{}, &FieldError{Field: "preset", Msg: fmt.Sprintf("%q is not a preset; want one of %s", strictjson.Clip(name), strings.Join(PresetNames(), ", "))}
	}
	if s.Cycles != nil && *s.Cycles == 0 {
		// 0 cycles is no work; a timed run is the one without the field.
		return Resolved{}, &FieldError{Field: "cycles", Msg: fmt.Sprintf("0: want 1 to %d write cycles a consumer; leave cycles out for a timed run", MaxCycles)}
	}
	set(&r.Consumers, s.Consumers)
	set(&r.SizeBytes, s.SizeBytes)
	set(&r.WritesPerCycle, s.WritesPerCycle)
	set(&r.Sleep, s.Sleep)
	set(&r.Interval, s.Interval)
	set(&r.LeadIn, s.LeadIn)
	set(&r.MemoryLimitBytes, s.MemoryLimitBytes)
	set(&r.Scale, s.Scale)
	set(&r.Backing, s.Backing)
	set(&r.Fill, s.Fill)
	set(&r.Repeats, s.Repeats)
	set(&r.Cycles, s.Cycles)
	set(&r.Policy, s.Policy)
	set(&r.SwapDevice, s.SwapDevice)
	if len(s.Settings) > 0 {
		r.Settings = s.Settings
	}
	if r.Scale <= 0 || r.Scale > 100 || math.IsNaN(r.Scale) {
		return Resolved{}, &FieldError{Field: "scale", Msg: fmt.Sprintf("%g: want more than 0 and at most 100", r.Scale)}
	}
	// The sizes as given, before the scale multiplies them: a negative or
	// absurd one is named as the client wrote it.
	if r.SizeBytes < 1 || r.SizeBytes > MaxSizeBytes {
		return Resolved{}, &FieldError{Field: "size_bytes", Msg: fmt.Sprintf("%d: want 1 to %d (1 TiB) bytes a consumer, before scale", r.SizeBytes, int64(MaxSizeBytes))}
	}
	if r.MemoryLimitBytes < 1 || r.MemoryLimitBytes > MaxMemoryLimit {
		return Resolved{}, &FieldError{Field: "memory_limit_bytes", Msg: fmt.Sprintf("%d: want 1 to %d (64 TiB) bytes, before scale", r.MemoryLimitBytes, int64(MaxMemoryLimit))}
	}
	// Scale sizes, not times: a scaled run keeps the paper's timeline.
	// Both products are below 2^53 (100 × 64 TiB), exact in a float64.
	r.SizeBytes = pageRound(float64(r.SizeBytes) * r.Scale)
	r.MemoryLimitBytes = pageRound(float64(r.MemoryLimitBytes) * r.Scale)
	// W scales with S, so a cycle touches the paper's fraction of a
	// consumer's pages at any scale (W is about the pages a cycle touches:
	// e1's 1,000 of 24,414, 4 %). A W the client gave is kept as given.
	if s.WritesPerCycle == nil && r.WritesPerCycle > 0 {
		r.WritesPerCycle = max(1, int(math.Round(float64(r.WritesPerCycle)*r.Scale)))
	}
	return r, r.Validate()
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

func pageRound(v float64) int64 {
	const page = 4096
	return int64(math.Round(v/page)) * page
}

// Validate checks that a resolved spec makes sense at all, whatever the host.
func (r Resolved) Validate() error {
	fill := r.Traits().Chunks
	switch {
	case r.Consumers < 1 || r.Consumers > MaxConsumers:
		return &FieldError{Field: "consumers", Msg: fmt.Sprintf("%d: want 1 to %d", r.Consumers, MaxConsumers)}
	case r.SizeBytes < MinSizeBytes || r.SizeBytes > MaxSizeBytes:
		return &FieldError{Field: "size_bytes", Msg: fmt.Sprintf("%d after scale: want %d (1 MiB) to %d (1 TiB)", r.SizeBytes, MinSizeBytes, int64(MaxSizeBytes))}
	case r.MemoryLimitBytes < MinMemoryLimit || r.MemoryLimitBytes > MaxMemoryLimit:
		return &FieldError{Field: "memory_limit_bytes", Msg: fmt.Sprintf("%d after scale: want %d (16 MiB) to %d (64 TiB)", r.MemoryLimitBytes, MinMemoryLimit, int64(MaxMemoryLimit))}
	case r.Backing != BackingAnon && r.Backing != BackingFile:
		return &FieldError{Field: "backing", Msg: fmt.Sprintf("%q: want anon or file", strictjson.Clip(r.Backing))}
	case r.Fill != FillRandom && r.Fill != FillZero:
		return &FieldError{Field: "fill", Msg: fmt.Sprintf("%q: want random or zero", strictjson.Clip(r.Fill))}
	case !slices.Contains(policy.Names(), r.Policy):
		return &FieldError{Field: "policy", Msg: fmt.Sprintf("%q: want one of %s", strictjson.Clip(r.Policy), strings.Join(policy.Names(), ", "))}
	case r.LeadIn < 0 || r.LeadIn.D() > time.Hour:
		return &FieldError{Field: "lead_in", Msg: fmt.Sprintf("%s: want 0 to 1h", r.LeadIn)}
	}
	if err := r.SwapDevice.Validate(); err != nil {
		return &FieldError{Field: "swap_device", Msg: err.Error()}
	}
	if !r.SwapDevice.IsNone() && r.Backing != BackingAnon {
		return &FieldError{Field: "swap_device", Msg: "a swap device throttles swap, and backing=file pages to the data directory's file system, not to swap: want backing anon, or leave swap_device out"}
	}
	if err := r.validateSettings(); err != nil {
		return err
	}
	if fill {
		switch {
		case r.Repeats < 1 || r.Repeats > MaxRepeats:
			return &FieldError{Field: "repeats", Msg: fmt.Sprintf("%d: want 1 to %d", r.Repeats, MaxRepeats)}
		case r.Backing != BackingAnon:
			return &FieldError{Field: "backing", Msg: "the fill preset measures swap: want anon"}
		case r.Cycles != 0:
			return &FieldError{Field: "cycles", Msg: "the fill preset fills chunks, it writes no cycles; leave it out"}
		case policy.NeedsOf(r.Policy).Ticks:
			return &FieldError{Field: "policy", Msg: "the fill preset measures one process's fill: want " + policy.None}
		}
		return nil
	}
	switch {
	case r.Repeats != 0:
		return &FieldError{Field: "repeats", Msg: "only the fill preset repeats; leave it out"}
	case r.Cycles < 0 || r.Cycles > MaxCycles:
		return &FieldError{Field: "cycles", Msg: fmt.Sprintf("%d: want 1 to %d write cycles a consumer; leave cycles out for a timed run", r.Cycles, MaxCycles)}
	case r.WritesPerCycle < 1 || r.WritesPerCycle > MaxWrites:
		return &FieldError{Field: "writes_per_cycle", Msg: fmt.Sprintf("%d: want 1 to %d", r.WritesPerCycle, MaxWrites)}
	case r.Sleep < 0 || r.Sleep.D() > time.Minute:
		return &FieldError{Field: "sleep", Msg: fmt.Sprintf("%s: want 0 to 1m", r.Sleep)}
	case r.Interval.D() < 10*time.Millisecond || r.Interval.D() > MaxRunDuration:
		// Bounded before Duration multiplies it by the consumers.
		return &FieldError{Field: "interval", Msg: fmt.Sprintf("%s: want 10ms to %s", r.Interval, MaxRunDuration)}
	case r.Duration() > MaxRunDuration:
		return &FieldError{Field: "interval", Msg: fmt.Sprintf("the run would last %s (lead_in + 2 × consumers × interval): want at most %s; lower interval or consumers", r.Duration(), MaxRunDuration)}
	}
	return nil
}

// Demand is the memory the run asks for at its peak.
func (r Resolved) Demand() int64 { return int64(r.Consumers) * r.SizeBytes }
