package run

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/settings"
	"github.com/thrashscope/thrashscope/internal/strictjson"
	"github.com/thrashscope/thrashscope/internal/swapdev"
)

// A record read back from a data dir is input, not trusted data: the report,
// the comparison and the findings print its strings into files a root-run
// tool writes, and compute with its numbers. So it is held to what
// thrashscope writes, as strictly as a spec is on the way in.

// IDPattern is a run id: safe as a path and a cgroup name.
var IDPattern = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

// Bounds on a record's text, well above what thrashscope writes.
const (
	maxReasonBytes = 4096
	maxCgroupBytes = 4096 // PATH_MAX
	maxShortBytes  = 256  // an exit, a decision's why or error
	maxNameBytes   = 64   // a process named in a transition
	// MaxTransitions bounds a record's detector transitions: one a
	// second through the longest run.
	MaxTransitions = 3 * int(MaxRunDuration/1e9)
	maxPID         = 1 << 22 // PID_MAX_LIMIT
)

// States a saved record may be in.
var savedStates = []string{StatePending, StateRunning, StateCompleted, StateAborted, StateFailed}

var transitionStates = []string{"normal", "monitoring", "thrashing"}

var decisionKinds = []string{string(policy.Protect), string(policy.Release), string(policy.Freeze), string(policy.Thaw)}

// Normalize fills what records of older versions leave out: a run without
// a policy ran under none.
func (rec *Record) Normalize() {
	if rec.Spec.Policy == "" {
		rec.Spec.Policy = policy.None
	}
	if rec.Spec.SwapDevice.Profile == "" {
		rec.Spec.SwapDevice.Profile = swapdev.None // before swap devices
	}
}

// Validate checks a record read back: its id, its spec as Resolve would
// have made it, each enum, each number finite and in range, each string
// valid UTF-8 of bounded length without control characters (a process
// name excepted: a process chooses its own), each consumer's index its
// place. The error names the member.
func (rec *Record) Validate() error {
	if !IDPattern.MatchString(rec.ID) {
		return fmt.Errorf("id %q: want 1 to 64 of a-z, 0-9 and -", strictjson.Clip(rec.ID))
	}
	if err := rec.Spec.validateStored(); err != nil {
		return fmt.Errorf("spec.%w", err)
	}
	if !slices.Contains(savedStates, rec.State) {
		return fmt.Errorf("state %q: want one of %s", strictjson.Clip(rec.State), strings.Join(savedStates, ", "))
	}
	if err := text("reason", rec.Reason, maxReasonBytes); err != nil {
		return err
	}
	if err := text("cgroup", rec.Cgroup, maxCgroupBytes); err != nil {
		return err
	}
	if rec.StartedAt.IsZero() {
		return fmt.Errorf("started_at: missing")
	}
	if rec.EndedAt != nil && rec.EndedAt.Before(rec.StartedAt) {
		return fmt.Errorf("ended_at %s is before started_at %s", rec.EndedAt, rec.StartedAt)
	}
	if n := len(rec.Consumers); n != 0 && n != rec.Spec.Processes() {
		return fmt.Errorf("consumers: %d listed, the spec plans %d", n, rec.Spec.Processes())
	}
	for i, c := range rec.Consumers {
		if err := c.validate(i); err != nil {
			return fmt.Errorf("consumers[%d].%w", i, err)
		}
	}
	if !slices.Contains([]string{"", "memory.min", "mlock"}, rec.Protection) {
		return fmt.Errorf("protection %q: want memory.min or mlock", strictjson.Clip(rec.Protection))
	}
	if err := rec.validateReadings(); err != nil {
		return err
	}
	if err := rec.validateTransitions(); err != nil {
		return err
	}
	if a := rec.Alone; a != nil {
		if err := processFields("alone.", a.PID, a.Exit, a.RunSeconds); err != nil {
			return err
		}
	}
	return rec.validateDecisions()
}

// validateReadings checks what a record read of the kernel: the makespan,
// the pressure, the memory events and the swap device's emulation.
func (rec *Record) validateReadings() error {
	if err := seconds("makespan_seconds", rec.MakespanSeconds); err != nil {
		return err
	}
	if p := rec.Pressure; p != nil {
		if err := seconds("pressure.some_seconds", p.SomeSeconds); err != nil {
			return err
		}
		if err := seconds("pressure.full_seconds", p.FullSeconds); err != nil {
			return err
		}
	}
	for k := range rec.MemoryEvents {
		if !slices.Contains(MemoryEventNames, k) {
			return fmt.Errorf("memory_events.%s: want one of %s", strictjson.Clip(k), strings.Join(MemoryEventNames, ", "))
		}
	}
	if e := rec.SwapEmulation; e != nil {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("swap_emulation.%w", err)
		}
	}
	if len(rec.Pauses) > MaxPauses {
		return fmt.Errorf("pauses: %d, want at most %d", len(rec.Pauses), MaxPauses)
	}
	for i, p := range rec.Pauses {
		if err := seconds(fmt.Sprintf("pauses[%d].seconds", i), p.Seconds); err != nil {
			return err
		}
	}
	return nil
}

// validateTransitions checks the detector's transitions a record lists.
func (rec *Record) validateTransitions() error {
	if len(rec.Transitions) > MaxTransitions {
		return fmt.Errorf("transitions: %d, more than the %d a run can make", len(rec.Transitions), MaxTransitions)
	}
	for i, tr := range rec.Transitions {
		if !slices.Contains(transitionStates, tr.To) {
			return fmt.Errorf("transitions[%d].to %q: want one of %s", i, strictjson.Clip(tr.To), strings.Join(transitionStates, ", "))
		}
		if len(tr.Processes) > MaxConsumers+maxNameBytes {
			return fmt.Errorf("transitions[%d].processes: %d names", i, len(tr.Processes))
		}
		for j, name := range tr.Processes {
			if !utf8.ValidString(name) || len(name) > maxNameBytes {
				return fmt.Errorf("transitions[%d].processes[%d] %q: want text of at most %d bytes", i, j, strictjson.Clip(name), maxNameBytes)
			}
		}
	}
	return nil
}

// validateDecisions checks the policy's decisions a record lists.
func (rec *Record) validateDecisions() error {
	if len(rec.Decisions) > MaxDecisions {
		return fmt.Errorf("decisions: %d, more than the %d a record keeps", len(rec.Decisions), MaxDecisions)
	}
	for i, d := range rec.Decisions {
		switch {
		case !slices.Contains(decisionKinds, d.Kind):
			return fmt.Errorf("decisions[%d].kind %q: want one of %s", i, strictjson.Clip(d.Kind), strings.Join(decisionKinds, ", "))
		case d.Consumer < 0 || d.Consumer >= rec.Spec.Processes():
			return fmt.Errorf("decisions[%d].consumer %d: the run has consumers 0 to %d", i, d.Consumer, rec.Spec.Processes()-1)
		}
		if err := text(fmt.Sprintf("decisions[%d].why", i), d.Why, maxShortBytes); err != nil {
			return err
		}
		if err := text(fmt.Sprintf("decisions[%d].error", i), d.Error, maxReasonBytes); err != nil {
			return err
		}
	}
	return nil
}

// validateStored is Validate for a spec read back: Resolve's range of the
// scale, which Validate leaves to Resolve, and Validate itself.
func (r Resolved) validateStored() error {
	if math.IsNaN(r.Scale) || r.Scale <= 0 || r.Scale > 100 {
		return &FieldError{Field: "scale", Msg: fmt.Sprintf("%g: want more than 0 and at most 100", r.Scale)}
	}
	if _, ok := presetSpec(r.Preset); !ok {
		return &FieldError{Field: "preset", Msg: fmt.Sprintf("%q: want one of %s", strictjson.Clip(r.Preset), strings.Join(PresetNames(), ", "))}
	}
	return r.Validate()
}

func (c ConsumerRecord) validate(i int) error {
	if c.Index != i {
		return fmt.Errorf("index %d: it is listed at %d", c.Index, i)
	}
	if err := processFields("", c.PID, c.Exit, c.RunSeconds); err != nil {
		return err
	}
	if err := seconds("lateness_seconds", c.LatenessSeconds); err != nil {
		return err
	}
	if math.IsNaN(c.Slowdown) || c.Slowdown < 0 || c.Slowdown > 1e6 {
		return fmt.Errorf("slowdown %g: want 0 to 1e6", c.Slowdown)
	}
	return nil
}

func processFields(prefix string, pid int, exit string, runSeconds float64) error {
	if pid < 0 || pid > maxPID {
		return fmt.Errorf("%spid %d: want 0 to %d", prefix, pid, maxPID)
	}
	if err := text(prefix+"exit", exit, maxShortBytes); err != nil {
		return err
	}
	return seconds(prefix+"run_seconds", runSeconds)
}

// seconds checks a duration of a run's: finite, 0 to three times the
// longest run (the consumer alone, the run, its grace).
func seconds(field string, v float64) error {
	if limit := 3 * MaxRunDuration.Seconds(); math.IsNaN(v) || v < 0 || v > limit {
		return fmt.Errorf("%s %g: want 0 to %g", field, v, limit)
	}
	return nil
}

// text checks a string of a record: valid UTF-8, at most max bytes, and no
// control characters (a newline in a reason would start a line of its own
// in a report).
func text(field, s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("%s: %d bytes, more than %d", field, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q: not valid UTF-8", field, strictjson.Clip(s))
	case strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Errorf("%s %q: holds a control character", field, strictjson.Clip(s))
	}
	return nil
}

// Printable makes text safe for a line of its own: every control character
// becomes a space, invalid UTF-8 U+FFFD. What thrashscope records from
// elsewhere (a consumer's last line of stderr) goes through it.
func Printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// validateSettings checks the settings against the rest of the spec: a
// swap backend needs pages that go to swap, an emulated device emulates a
// disk, not RAM, and memory.high throttles below the limit.
func (r Resolved) validateSettings() error {
	swap := r.Settings.Value("swap")
	switch {
	case swap != "" && r.Backing != BackingAnon:
		return &FieldError{Field: "settings", Msg: "swap: backing=file pages to the data directory's file system, not to swap: want backing anon, or leave swap out"}
	case swap == settings.SwapZram && !r.SwapDevice.IsNone():
		return &FieldError{Field: "settings", Msg: "swap: a swap_device emulates a disk, and zram is memory: leave one of them out"}
	case swap != "" && r.Settings.Value("zswap") != "":
		return &FieldError{Field: "settings", Msg: "swap names the backend, zswap on or off with it: leave zswap out"}
	}
	if v := r.Settings.Value("memory_high"); v != "" {
		if high, _ := strconv.ParseInt(v, 10, 64); high >= r.MemoryLimitBytes {
			return &FieldError{Field: "settings", Msg: fmt.Sprintf("memory_high: %d is not below the run's memory limit, %d bytes after scale: want less, for memory.high to throttle before memory.max", high, r.MemoryLimitBytes)}
		}
	}
	return nil
}
