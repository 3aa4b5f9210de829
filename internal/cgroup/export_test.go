package cgroup

import "path/filepath"

// CreateWith makes a cgroup with only the given control-file settings
// (file, value), so tests can see Create clean up after the kernel rejects
// one, or make a v2 cgroup where memory is not enabled.
func (p Parent) CreateWith(name string, settings ...[2]string) (*Cgroup, error) {
	var s []setting
	for _, kv := range settings {
		s = append(s, setting{file: kv[0], value: kv[1]})
	}
	return p.create(name, s)
}

// OwnV2 is this process's cgroup on the unified hierarchy, if mounted, even
// when memory is on v1: the v2 mechanics can be tested there.
func OwnV2(procRoot string) (Parent, bool) {
	_, unified, err := readProcCgroup(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil || unified == "" {
		return Parent{}, false
	}
	mounts, err := readMountinfo(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return Parent{}, false
	}
	dir, ok := locate(mounts, unified, isV2)
	return Parent{Path: dir, V2: true}, ok
}

// RescueV2 is one rescue of the v2 guard, as its loop does one.
func (g *OOMGuard) RescueV2() bool { return g.rescueV2() }
