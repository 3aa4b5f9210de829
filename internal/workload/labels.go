// Package workload names the cgroups that fault and stall as the workloads
// an SRE knows them by: a systemd unit and its slice, a Kubernetes pod and
// container, parsed from the cgroup's path in the cgroup2 hierarchy.
package workload

import (
	"regexp"
	"strings"

	"github.com/thrashscope/thrashscope/internal/labelvalue"
)

// Labels are what a cgroup's series are joined on. Cgroup is always set;
// the others where the path has their shape, else empty.
type Labels struct {
	// Cgroup is the path from the cgroup2 root, "/" for the root itself.
	Cgroup string
	// Unit is the system manager's unit (service, scope, socket, mount,
	// swap) the cgroup is or is in, Slice the deepest slice above it (or
	// the deepest slice, for a cgroup that is a slice): see Trust.
	Unit, Slice string
	// PodUID is the pod's UID with dashes (as kube-state-metrics' uid),
	// ContainerID the container runtime's id, QoS the pod's class
	// (guaranteed, burstable, besteffort).
	PodUID, ContainerID, QoS string
}

var (
	// The kubelet's levels, under its --cgroup-root (the systemd driver
	// prefixes each name with its parents'): kubepods,
	// the QoS class, pod<uid> (the systemd driver writes the UID's dashes
	// as underscores).
	kubeRe = regexp.MustCompile(`^(?:.*-)?kubepods(?:\.slice)?$`)
	qosRe  = regexp.MustCompile(`^(?:(?:.*-)?kubepods-)?(burstable|besteffort)(?:\.slice)?$`)
	podRe  = regexp.MustCompile(`^(?:.*-)?pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})(?:\.slice)?$`)
	// A container: <runtime>-<id>.scope (systemd driver; cri-containerd,
	// crio, docker, libpod), or a bare id, or crio-<id> (cgroupfs driver).
	containerRe  = regexp.MustCompile(`^(?:(?:cri-containerd|crio|docker|libpod)-)?([0-9a-f]{64})(?:\.scope)?$`)
	unitSuffixes = []string{".service", ".scope", ".socket", ".mount", ".swap"}
)

// Trust says where in the hierarchy a path's shape can be believed: who
// can make a cgroup decides what its name may claim. A cgroup's own path
// (the cgroup label) is always true. A systemd unit or slice is read only
// along the system manager's tree, slices from the root down to the first
// unit: deeper names are inside that unit's own subtree, which its user
// may make as they like (user@UID.service is delegated to its user), so a
// user's units count as the user@UID.service that holds them. Kubernetes
// levels are read only right under the kubelet's cgroup root(s), where
// only root can make a group; anywhere else kubepods is just a name.
type Trust struct {
	// KubeletRoots are the kubelet's --cgroup-root as paths from the
	// cgroup2 root; none is "/" alone (the kubelet's default).
	KubeletRoots []string
}

// Parse reads the labels from a cgroup's path relative to the cgroup2
// root, trusting the kubelet's default root. Each value is a labelvalue:
// printable, bounded, and one to one with the name it came from, so two
// cgroups never share a series.
func Parse(path string) Labels { return Trust{}.Parse(path) }

// Parse reads the labels from a cgroup's path relative to the cgroup2
// root, each value a labelvalue.
func (tr Trust) Parse(path string) Labels {
	path = "/" + strings.Trim(path, "/")
	l := Labels{Cgroup: labelvalue.Escape(path)}
	parts := components(path)
	l.Unit, l.Slice = systemd(parts)
	roots := tr.KubeletRoots
	if len(roots) == 0 {
		roots = []string{"/"}
	}
	for _, r := range roots {
		if rest, ok := under(parts, components(r)); ok {
			l.PodUID, l.ContainerID, l.QoS = kubernetes(rest)
			if l.QoS != "" {
				break
			}
		}
	}
	return l
}

// components are a path's names, none for the root.
func components(path string) []string {
	if path = strings.Trim(path, "/"); path == "" {
		return nil
	}
	return strings.Split(path, "/")
}

// under is what follows root in parts, and whether parts is below root.
func under(parts, root []string) ([]string, bool) {
	if len(parts) < len(root) {
		return nil, false
	}
	for i, r := range root {
		if parts[i] != r {
			return nil, false
		}
	}
	return parts[len(root):], true
}

// systemd reads the system manager's tree: the slices from the root, and
// the first unit below them; a name that is neither ends it.
func systemd(parts []string) (unit, slice string) {
	for _, p := range parts {
		if strings.HasSuffix(p, ".slice") && len(p) > len(".slice") {
			slice = p
			continue
		}
		for _, s := range unitSuffixes {
			if strings.HasSuffix(p, s) && len(p) > len(s) {
				return labelvalue.Escape(p), labelvalue.Escape(slice)
			}
		}
		break
	}
	return "", labelvalue.Escape(slice)
}

// kubernetes reads the kubelet's levels from the names right under its
// root: kubepods, the QoS class (none for guaranteed), pod<uid>, and the
// container, each the child of the one before.
func kubernetes(rest []string) (podUID, containerID, qos string) {
	if len(rest) == 0 || !kubeRe.MatchString(rest[0]) {
		return "", "", ""
	}
	qos, rest = "guaranteed", rest[1:]
	if len(rest) > 0 && qosRe.MatchString(rest[0]) {
		qos, rest = qosRe.FindStringSubmatch(rest[0])[1], rest[1:]
	}
	if len(rest) == 0 || !podRe.MatchString(rest[0]) {
		return "", "", qos
	}
	podUID = strings.ReplaceAll(podRe.FindStringSubmatch(rest[0])[1], "_", "-")
	if len(rest) > 1 && containerRe.MatchString(rest[1]) {
		containerID = containerRe.FindStringSubmatch(rest[1])[1]
	}
	return podUID, containerID, qos
}
