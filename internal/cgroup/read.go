// Reading a cgroup's files: its processes, its memory limit and usage, its
// OOM kills, and the small parsers they share.

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// PIDs lists the processes in the cgroup, sorted (v1 may repeat them).
func (c *Cgroup) PIDs() ([]int, error) {
	pids, err := readPIDs(c.Path)
	if err != nil {
		return nil, fmt.Errorf("listing cgroup %s: %w", c.Path, err)
	}
	return pids, nil
}

func readPIDs(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroup.procs: %w", err)
		}
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// MemoryLimit reads back the memory limit; -1 means none.
func (c *Cgroup) MemoryLimit() (int64, error) {
	file := "memory.limit_in_bytes"
	if c.V2 {
		file = "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(c.Path, file))
	if err != nil {
		return 0, fmt.Errorf("reading memory limit of cgroup %s: %w", c.Path, err)
	}
	s := strings.TrimSpace(string(b))
	if c.V2 && s == "max" {
		return -1, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading memory limit of cgroup %s: %s: %w", c.Path, file, err)
	}
	if !c.V2 && n >= unlimitedV1 {
		return -1, nil
	}
	return n, nil
}

// MemoryUsage reads the memory charged to the cgroup, in bytes.
func (c *Cgroup) MemoryUsage() (int64, error) {
	file := "memory.usage_in_bytes"
	if c.V2 {
		file = "memory.current"
	}
	n, err := readInt(filepath.Join(c.Path, file))
	if err != nil {
		return 0, fmt.Errorf("reading memory usage of cgroup %s: %w", c.Path, err)
	}
	return n, nil
}

// OOMKills counts the processes the OOM killer has killed in the cgroup
// and every group below it: a run's consumers each live in a sub-cgroup.
// A victim is counted in its own group alone on v1 (memory.oom_control),
// and on v2 too when cgroup2 is mounted with memory_localevents, so each
// group's own count (v2: memory.events.local, Linux 5.2+) is summed.
func (c *Cgroup) OOMKills() (uint64, error) {
	file := "memory.oom_control"
	if c.V2 {
		file = "memory.events.local"
		if _, err := os.Stat(filepath.Join(c.Path, file)); err != nil {
			// Before Linux 5.2: the hierarchical count, which is the
			// only one there.
			return oomKillsIn(c.Path, "memory.events")
		}
	}
	var sum uint64
	err := filepath.WalkDir(c.Path, func(dir string, d fs.DirEntry, err error) error {
		if err != nil {
			if dir != c.Path && errors.Is(err, fs.ErrNotExist) {
				return nil // a consumer's group removed meanwhile
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		n, err := oomKillsIn(dir, file)
		if err != nil && !(dir != c.Path && errors.Is(err, fs.ErrNotExist)) {
			return err
		}
		sum += n
		return nil
	})
	return sum, err
}

// oomKillsIn reads the oom_kill line of one group's file.
func oomKillsIn(dir, file string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, fmt.Errorf("reading OOM kills of cgroup %s: %w", dir, err)
	}
	n, ok, err := keyedValue(string(b), "oom_kill")
	if err != nil {
		return 0, fmt.Errorf("reading OOM kills of cgroup %s: %s: %w", dir, file, err)
	}
	if !ok {
		// The v1 line came with Linux 4.13.
		return 0, fmt.Errorf("reading OOM kills of cgroup %s: no oom_kill line in %s: the kernel is too old to count them", dir, file)
	}
	return n, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return n, nil
}

// keyedValue finds "key N" in a flat-keyed file such as memory.events.
func keyedValue(text, key string) (uint64, bool, error) {
	for line := range strings.Lines(text) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || k != key {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s: %w", key, err)
		}
		return n, true, nil
	}
	return 0, false, nil
}
