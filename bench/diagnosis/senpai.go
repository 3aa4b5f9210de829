package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
)

// senpai is the peer that sizes a cgroup from its pressure alone: a
// re-implementation of senpai's published rule (its oomd plugin, with the
// plugin's defaults), not senpai itself. Once a second it adds the group's
// memory stall (PSI some) since its last change; past a target of 10 ms it
// raises the limit by a share that grows as the square of how far past
// (all of the limit at 20× the target, at most), else, after 6 seconds
// without reaching it, lowers it by at most 1 %. Senpai writes memory.high
// under memory.max and never past it; here, as a sizing, it moves the
// limit that binds (the run's own), the one the diagnosis's first remedy
// raises, so that both answer the same question: what limit ends the
// thrash.
type senpai struct {
	limitFile, pressureFile string
	limit, min, max         int64
	lastTotal, cumulative   time.Duration
	ticks                   int
	next                    time.Time
}

// The rule's defaults: the pressure target, the ticks it waits before
// lowering, the most it lowers and raises by a tick, and the deviations
// at which those are reached.
const (
	senpaiTarget       = 10 * time.Millisecond
	senpaiInterval     = 6
	senpaiMaxProbe     = 0.01
	senpaiMaxBackoff   = 1.0
	senpaiCoeffProbe   = 10.0
	senpaiCoeffBackoff = 20.0
	senpaiMinBytes     = 100 << 20
	senpaiTick         = time.Second
)

// newSenpai starts the rule on the run's own limit, at the group whose
// memory.pressure it reads (cgroup2's, which has PSI in every group).
func newSenpai(limitFile, unifiedGroup string, limit int64) (*senpai, error) {
	h, err := cgroup.UnifiedHierarchy("/proc")
	if err != nil {
		return nil, err
	}
	s := &senpai{limitFile: limitFile, pressureFile: filepath.Join(h.Dir(unifiedGroup), "memory.pressure"), limit: limit, min: senpaiMinBytes, ticks: senpaiInterval}
	if s.max, err = memTotal(); err != nil {
		return nil, err
	}
	if s.lastTotal, err = someTotal(s.pressureFile); err != nil {
		return nil, err
	}
	s.next = time.Now().Add(senpaiTick)
	return s, nil
}

// tick applies the rule once a second; it says whether it changed the
// limit.
func (s *senpai) tick(now time.Time) (bool, error) {
	if now.Before(s.next) {
		return false, nil
	}
	s.next = s.next.Add(senpaiTick)
	total, err := someTotal(s.pressureFile)
	if err != nil {
		return false, err
	}
	s.cumulative += total - s.lastTotal
	s.lastTotal = total
	var factor float64
	switch {
	case s.cumulative >= senpaiTarget:
		e := float64(s.cumulative) / float64(senpaiTarget) / senpaiCoeffBackoff
		factor = min(e*e*senpaiMaxBackoff, senpaiMaxBackoff)
	case s.ticks > 0:
		s.ticks--
		return false, nil
	default:
		e := float64(senpaiTarget) / float64(max(s.cumulative, time.Microsecond)) / senpaiCoeffProbe
		factor = -min(e*e*senpaiMaxProbe, senpaiMaxProbe)
	}
	s.limit = min(max(s.limit+int64(float64(s.limit)*factor), s.min), s.max) &^ 0xfff
	s.ticks, s.cumulative = senpaiInterval, 0
	return true, os.WriteFile(s.limitFile, []byte(strconv.FormatInt(s.limit, 10)), 0)
}

// someTotal is the "some" line's total stall in a memory.pressure file.
func someTotal(file string) (time.Duration, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("the group's pressure: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	for f := range strings.FieldsSeq(string(line)) {
		if v, ok := strings.CutPrefix(f, "total="); ok && strings.HasPrefix(string(line), "some ") {
			us, err := strconv.ParseInt(v, 10, 64)
			return time.Duration(us) * time.Microsecond, err
		}
	}
	return 0, fmt.Errorf("%s: no some total in %q", file, line)
}

// memTotal is the host's memory, the most senpai sizes a group to.
func memTotal() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/meminfo: no MemTotal")
}
