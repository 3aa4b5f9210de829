package diagnosis

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/workload"
)

// ioSeen is where a thrashing workload's I/O limits are (found at its
// first sample, again when they cannot be read) and what its throttle had
// let through at its last sample, for the rate at the next.
type ioSeen struct {
	dir   string // "": none found
	v2    bool
	at    time.Time
	stats map[string]cgroup.IOStat
}

// ioRateWithin is the longest gap between two of a workload's thrashing
// samples a rate of its I/O is taken over: a thrash that drops to
// monitoring for a sample or two keeps its rate (one throttled to 1,500
// reads a second did, its first sample back otherwise reading none).
const ioRateWithin = 5 * time.Second

// ioLimitOf is how much of its own I/O limit a thrashing group's reads
// used since its last sample (the larger of I/Os and bytes, on the device
// where it is largest) and that limit, as io.max writes it; -1 where it
// has no read limit or no earlier sample. The swap device a group sees is
// as fast as its limit lets it be: a run emulating a 2013 disk keeps the
// real disk idle, its consumers waiting on the throttle.
func (s *Stage) ioLimitOf(w workload.Workload, pids []int, now time.Time) (float64, string) {
	prev, ok := s.io[w.Cgroup]
	if !ok {
		prev.dir, prev.v2 = s.ioGroup(w, pids)
	}
	if prev.dir == "" {
		s.io[w.Cgroup] = prev // none: looked for once while it thrashes
		return -1, ""
	}
	limits, err := cgroup.ReadIOLimits(s.files, prev.dir, prev.v2)
	if err != nil {
		delete(s.io, w.Cgroup) // moved, or gone: found again next time
		return -1, ""
	}
	stats, err := cgroup.ReadIOStats(s.files, prev.dir, prev.v2)
	if err != nil || len(limits) == 0 {
		s.io[w.Cgroup] = ioSeen{dir: prev.dir, v2: prev.v2}
		return -1, ""
	}
	s.io[w.Cgroup] = ioSeen{dir: prev.dir, v2: prev.v2, at: now, stats: stats}
	dt := now.Sub(prev.at).Seconds()
	if prev.stats == nil || dt <= 0 || dt > ioRateWithin.Seconds() {
		return -1, "" // a rate over its last seconds, not since it last thrashed
	}
	best, name := -1.0, ""
	for _, l := range limits {
		cur, was := stats[l.Device], prev.stats[l.Device]
		for _, u := range []struct {
			key        string
			limit, now uint64
			then       uint64
		}{{"riops", l.ReadIOPS, cur.ReadIOs, was.ReadIOs}, {"rbps", l.ReadBPS, cur.ReadBytes, was.ReadBytes}} {
			if u.limit == 0 || u.now < u.then {
				continue
			}
			if pct := 100 * float64(u.now-u.then) / dt / float64(u.limit); pct > best {
				best, name = pct, fmt.Sprintf("%s %s=%d", l.Device, u.key, u.limit)
			}
		}
	}
	return best, name
}

// ioGroup is the group whose I/O limits bind a workload's reads: its
// cgroup2 group where the io controller is on there, else its processes'
// group in the v1 blkio hierarchy (a host with memory on v1).
func (s *Stage) ioGroup(w workload.Workload, pids []int) (string, bool) {
	if w.Files.V2 != "" {
		if _, err := s.files.ReadFileAt(w.Files.V2, "io.max"); err == nil {
			return w.Files.V2, true
		}
	}
	if len(pids) == 0 || s.cfg.Proc == "" {
		return "", false
	}
	if !s.blkioKnown {
		s.blkio, _ = cgroup.V1BlkioMount(s.cfg.Proc)
		s.blkioKnown = true
	}
	if s.blkio == "" {
		return "", false
	}
	b, err := os.ReadFile(filepath.Join(s.cfg.Proc, strconv.Itoa(pids[0]), "cgroup"))
	if err != nil {
		return "", false
	}
	for line := range strings.Lines(string(b)) {
		// "7:blkio:/thrashscope-run-…"
		_, rest, _ := strings.Cut(strings.TrimSpace(line), ":")
		ctrls, path, _ := strings.Cut(rest, ":")
		for c := range strings.SplitSeq(ctrls, ",") {
			if c == "blkio" && !strings.Contains(path, "..") {
				return filepath.Join(s.blkio, path), false
			}
		}
	}
	return "", false
}
