package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ChooseParent is the parent of the run cgroups, chosen in one place for
// the daemon and loadgen run alike: path (--cgroup.parent) when given, else
// the memory cgroup this process runs in; checked that run cgroups can be
// made there.
func ChooseParent(path, procRoot string) (Parent, error) {
	if path != "" {
		return ParentAt(path) // checks
	}
	p, err := Own(procRoot)
	if err != nil {
		return p, err
	}
	return p, p.Check()
}

// Own finds the memory cgroup this process runs in: in the v1 memory
// hierarchy if memory is mounted on v1, else in the unified one. It only
// reads procRoot ("/proc" normally) and does not check that run cgroups can
// be made there: Check does.
func Own(procRoot string) (Parent, error) {
	memory, unified, err := readProcCgroup(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return Parent{}, fmt.Errorf("finding own cgroup: %w", err)
	}
	mounts, err := readMountinfo(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return Parent{}, fmt.Errorf("finding own cgroup: %w", err)
	}
	// The memory controller is on one hierarchy only: a v1 one if a line
	// names it, else the unified one.
	if memory != "" {
		if dir, ok := locate(mounts, memory, isV1Memory); ok {
			return Parent{Path: dir}, nil
		}
	}
	if unified != "" {
		if dir, ok := locate(mounts, unified, isV2); ok {
			return Parent{Path: dir, V2: true}, nil
		}
	}
	return Parent{}, errors.New("finding own cgroup: no cgroup v1 memory mount nor cgroup v2 mount holds this process: mount the memory controller (or cgroup2), or set --cgroup.parent")
}

// OwnUnified finds this process's cgroup in the unified (v2) hierarchy, which
// has memory.pressure in every group even where the memory controller is on
// v1: a group made there gives the PSI of the processes put in it. It is
// the same as Own on a pure v2 host.
func OwnUnified(procRoot string) (Parent, error) {
	_, unified, err := readProcCgroup(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return Parent{}, fmt.Errorf("finding own cgroup2 group: %w", err)
	}
	mounts, err := readMountinfo(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return Parent{}, fmt.Errorf("finding own cgroup2 group: %w", err)
	}
	if unified != "" {
		if dir, ok := locate(mounts, unified, isV2); ok {
			return Parent{Path: dir, V2: true}, nil
		}
	}
	return Parent{}, errors.New("finding own cgroup2 group: no cgroup2 mount holds this process: mount cgroup2 (e.g. at /sys/fs/cgroup/unified)")
}

// readProcCgroup returns this process's path in the v1 hierarchy with the
// memory controller and in the unified hierarchy; either may be empty.
func readProcCgroup(file string) (memory, unified string, err error) {
	f, err := os.Open(file)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		id, rest, ok1 := strings.Cut(sc.Text(), ":")
		controllers, cgPath, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			unified = cgPath
		case slices.Contains(strings.Split(controllers, ","), "memory"):
			memory = cgPath
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", fmt.Errorf("%s: %w", file, err)
	}
	return memory, unified, nil
}

// mount is one cgroup filesystem from mountinfo.
type mount struct {
	root, point, fstype string
	superOptions        []string
}

func isV1Memory(m mount) bool {
	return m.fstype == "cgroup" && slices.Contains(m.superOptions, "memory")
}

func isV2(m mount) bool { return m.fstype == "cgroup2" }

// readMountinfo returns the cgroup mounts, in mount order.
func readMountinfo(file string) ([]mount, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounts []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// id parent major:minor root mount-point options [optional...] - fstype source super-options
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 6 || len(fields) < sep+4 {
			continue
		}
		m := mount{
			root:         unescape(fields[3]),
			point:        unescape(fields[4]),
			fstype:       fields[sep+1],
			superOptions: strings.Split(fields[sep+3], ","),
		}
		if isV2(m) || m.fstype == "cgroup" {
			mounts = append(mounts, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return mounts, nil
}

// locate maps a cgroup path to a directory through the first matching mount
// whose root holds it: a container may see only a bind-mounted subtree.
func locate(mounts []mount, cgPath string, match func(mount) bool) (string, bool) {
	// A cgroup outside our namespace's root shows as "/../..": not ours
	// to nest under.
	if !path.IsAbs(cgPath) || slices.Contains(strings.Split(cgPath, "/"), "..") {
		return "", false
	}
	for _, m := range mounts {
		if !match(m) {
			continue
		}
		switch {
		case m.root == "/":
			return filepath.Join(m.point, cgPath), true
		case cgPath == m.root:
			return m.point, true
		case strings.HasPrefix(cgPath, m.root+"/"):
			return filepath.Join(m.point, cgPath[len(m.root):]), true
		}
	}
	return "", false
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Hierarchy is where the cgroup2 hierarchy is mounted: Point, the
// directory, shows the group Root (the whole tree's "/" on a host; a
// container may see a subtree).
type Hierarchy struct {
	Point, Root string
}

// UnifiedHierarchy finds the cgroup2 mount that shows the most of the
// tree: the whole of it where one shows its root.
func UnifiedHierarchy(procRoot string) (Hierarchy, error) {
	mounts, err := readMountinfo(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return Hierarchy{}, fmt.Errorf("finding the cgroup2 mount: %w", err)
	}
	var best *mount
	for i, m := range mounts {
		if isV2(m) && (best == nil || len(m.root) < len(best.root)) {
			best = &mounts[i]
		}
	}
	if best == nil {
		return Hierarchy{}, errors.New("no cgroup2 mount: mount cgroup2 (at /sys/fs/cgroup, or /sys/fs/cgroup/unified beside a v1 memory hierarchy) to see workloads")
	}
	return Hierarchy{Point: best.point, Root: best.root}, nil
}

// V1MemoryMount is where the v1 memory controller is mounted showing its
// whole tree, and false where memory is not on v1 (or only a subtree is
// shown).
func V1MemoryMount(procRoot string) (string, bool) {
	mounts, err := readMountinfo(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return "", false
	}
	for _, m := range mounts {
		if isV1Memory(m) && m.root == "/" {
			return m.point, true
		}
	}
	return "", false
}

// V1BlkioMount is where the v1 blkio controller is mounted showing its
// whole tree, and false where it is not.
func V1BlkioMount(procRoot string) (string, bool) {
	mounts, err := readMountinfo(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return "", false
	}
	for _, m := range mounts {
		if m.fstype == "cgroup" && slices.Contains(m.superOptions, "blkio") && m.root == "/" {
			return m.point, true
		}
	}
	return "", false
}

// Dir is the directory of the group at path, a path from the hierarchy's
// root as /proc/<pid>/cgroup shows it.
func (h Hierarchy) Dir(path string) string {
	rel, ok := strings.CutPrefix(path, h.Root)
	if !ok {
		rel = path
	}
	return filepath.Join(h.Point, rel)
}

// HostMount reads a host's cgroup mount given as a directory (a
// container's read-only view of the host's /sys/fs/cgroup): the cgroup2
// hierarchy, and the v1 memory hierarchy beside it on a hybrid host. A
// pure cgroup2 host's /sys/fs/cgroup is the cgroup2 root itself; a hybrid
// host's is a tmpfs holding unified/ (cgroup2) and memory/ (v1), so
// either may be mounted there.
func HostMount(dir string) (h Hierarchy, v1Memory string, err error) {
	isFile := func(p ...string) bool {
		fi, err := os.Stat(filepath.Join(p...))
		return err == nil && !fi.IsDir()
	}
	switch {
	case isFile(dir, "cgroup.controllers"):
		return Hierarchy{Point: dir, Root: "/"}, "", nil
	case isFile(dir, "unified", "cgroup.controllers"):
		if isFile(dir, "memory", "memory.limit_in_bytes") {
			v1Memory = filepath.Join(dir, "memory")
		}
		return Hierarchy{Point: filepath.Join(dir, "unified"), Root: "/"}, v1Memory, nil
	}
	return Hierarchy{}, "", fmt.Errorf("%s is not a cgroup2 mount, nor a hybrid host's cgroup directory (no cgroup.controllers there or in unified/): mount the host's /sys/fs/cgroup there read-only", dir)
}
