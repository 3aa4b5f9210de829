package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// snapshot is what an engine could leave behind: cgroups, mounts,
// processes of the engines and what they run, network interfaces, network
// namespaces, and files in the engines' default state directories.
type snapshot struct {
	cgroups, mounts, processes, links, netns, files map[string]bool
}

// stateDirs are where engines keep state and configuration by default;
// the kits point theirs elsewhere, and nothing may appear here.
var stateDirs = []string{"/etc/cni", "/etc/containers", "/etc/kubernetes", "/run/libpod", "/run/containers",
	"/run/containerd", "/var/lib/containers", "/var/lib/containerd", "/var/lib/cni", "/var/lib/kubelet",
	"/var/log/containers", "/var/log/pods", podmanLocks}

// engineProcesses are the commands the kits start, directly or through an
// engine.
var engineProcesses = []string{"podman", "conmon", "containerd", "containerd-shim", "containerd-shim-runc-v2", "kubelet",
	"runc", "observer", "loadgen", "prometheus", "prometheus-alertmanager", "alertmanager", "pause", "catatonit",
	"podman-compose", "aardvark-dns", "netavark", "slirp4netns"}

func takeSnapshot() (snapshot, error) {
	s := snapshot{cgroups: map[string]bool{}, mounts: map[string]bool{}, processes: map[string]bool{},
		links: map[string]bool{}, netns: map[string]bool{}, files: map[string]bool{}}
	for _, dir := range stateDirs {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil {
				s.files[p] = true
			}
			return nil
		})
	}
	// Every cgroup, in every hierarchy, to depth 4: the engines make
	// theirs at depth 1 to 3 (libpod_parent/…, kubepods/burstable/pod…/…).
	err := filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if strings.Count(strings.TrimPrefix(p, "/sys/fs/cgroup"), "/") > 5 {
			return fs.SkipDir
		}
		s.cgroups[p] = true
		return nil
	})
	if err != nil {
		return s, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return s, err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			s.mounts[fields[4]] = true
		}
	}
	f.Close()
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		exe, err := os.Readlink(filepath.Join("/proc", p.Name(), "exe"))
		if err != nil {
			continue
		}
		if slices.Contains(engineProcesses, filepath.Base(strings.TrimSuffix(exe, " (deleted)"))) {
			s.processes[p.Name()+" "+exe] = true
		}
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		s.links[l.Name()] = true
	}
	ns, _ := os.ReadDir("/run/netns")
	for _, n := range ns {
		s.netns[n.Name()] = true
	}
	return s, nil
}

// leftovers are what after has and s had not.
func (s snapshot) leftovers(after snapshot) []string {
	var out []string
	for _, c := range []struct {
		what          string
		before, after map[string]bool
	}{
		{"cgroup", s.cgroups, after.cgroups},
		{"mount", s.mounts, after.mounts},
		{"process", s.processes, after.processes},
		{"network interface", s.links, after.links},
		{"network namespace", s.netns, after.netns},
		{"file", s.files, after.files},
	} {
		var names []string
		for n := range c.after {
			if !c.before[n] {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		for _, n := range names {
			out = append(out, fmt.Sprintf("%s %s", c.what, n))
		}
	}
	return out
}

// firstUseCache is where podman keeps its blob cache whatever --root says:
// made at its first pull or build on a machine, none of the kits' own state.
const firstUseCache = "/var/lib/containers"

// podmanLocks is the shared memory podman makes for its locks at its first
// use on a host, whatever --root the kits give it.
const podmanLocks = "/dev/shm/libpod_lock"

// clearFirstUse removes what podman makes at its first use on a machine and
// leaves for good, when it was not there before the kits ran: its
// libpod_parent cgroups (cgroupfs manager), if empty, and its blob cache
// under /var/lib/containers/cache, if nothing else is there. Anything a kit
// started is still in them then, and stays, to be reported.
func clearFirstUse(before snapshot) []string {
	var removed []string
	now, err := takeSnapshot()
	if err != nil {
		return nil
	}
	var groups []string
	for c := range now.cgroups {
		if !before.cgroups[c] && strings.Contains(c+"/", "/libpod_parent/") {
			groups = append(groups, c)
		}
	}
	// Deepest first: a cgroup goes only once its children have.
	slices.SortFunc(groups, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, c := range groups {
		if os.Remove(c) == nil {
			removed = append(removed, "cgroup "+c)
		}
	}
	if !before.files[podmanLocks] && now.files[podmanLocks] && os.Remove(podmanLocks) == nil {
		removed = append(removed, podmanLocks+" (podman's locks)")
	}
	if before.files[firstUseCache] || !now.files[firstUseCache] {
		return removed
	}
	for f := range now.files {
		if strings.HasPrefix(f, firstUseCache+"/") && f != firstUseCache+"/cache" && !strings.HasPrefix(f, firstUseCache+"/cache/") {
			return removed // a kit's state is there too: leave it to be reported
		}
	}
	if os.RemoveAll(firstUseCache) == nil {
		removed = append(removed, firstUseCache+" (podman's blob cache)")
	}
	return removed
}

// owned says what the engines' state directories hold in the baseline,
// by top directory: what the packages installed there (podman's
// /etc/containers, say), which no kit left.
func (s snapshot) owned() string {
	count := map[string]int{}
	for f := range s.files {
		for _, dir := range stateDirs {
			if f == dir || strings.HasPrefix(f, dir+"/") {
				count[dir]++
			}
		}
	}
	var out []string
	for _, dir := range stateDirs {
		if count[dir] > 0 {
			out = append(out, fmt.Sprintf("%s (%d)", dir, count[dir]))
		}
	}
	if len(out) == 0 {
		return "nothing in the engines' state directories"
	}
	return "files and directories in " + strings.Join(out, ", ")
}
