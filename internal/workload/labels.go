// Package workload names the cgroups that fault and stall as the workloads
// an SRE knows them by: a systemd unit and its slice, a Kubernetes pod and
// container, parsed from the cgroup's path in the cgroup2 hierarchy.
package workload

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Labels are what a cgroup's series are joined on. Cgroup is always set;
// the others where the path has their shape, else empty.
type Labels struct {
	// Cgroup is the path from the cgroup2 root, "/" for the root itself.
	Cgroup string
	// Unit is the deepest systemd unit (service, scope, socket, mount,
	// swap) in the path, Slice the deepest slice above it (or the deepest
	// slice, for a cgroup that is a slice).
	Unit, Slice string
	// PodUID is the pod's UID with dashes (as kube-state-metrics' uid),
	// ContainerID the container runtime's id, QoS the pod's class
	// (guaranteed, burstable, besteffort).
	PodUID, ContainerID, QoS string
}

// maxLabelBytes bounds a label value: a cgroup name may be as long as the
// file system allows, and a series is not the place for all of it.
const maxLabelBytes = 256

var (
	// The kubelet's levels, under whatever --cgroup-root it was given
	// (the systemd driver prefixes each name with its parents'): kubepods,
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

// Parse reads the labels from a cgroup's path relative to the cgroup2
// root. Each value is valid UTF-8, without control characters, and at
// most maxLabelBytes long.
func Parse(path string) Labels {
	path = "/" + strings.Trim(path, "/")
	l := Labels{Cgroup: clean(path)}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	kube := false
	slice := ""
	for _, p := range parts {
		switch {
		case !kube && kubeRe.MatchString(p):
			kube = true
			l.QoS = "guaranteed" // unless a class level follows
		case kube && l.PodUID == "" && qosRe.MatchString(p):
			l.QoS = qosRe.FindStringSubmatch(p)[1]
		case kube && l.PodUID == "" && podRe.MatchString(p):
			l.PodUID = strings.ReplaceAll(podRe.FindStringSubmatch(p)[1], "_", "-")
		case kube && l.PodUID != "" && containerRe.MatchString(p):
			l.ContainerID = containerRe.FindStringSubmatch(p)[1]
		}
		if strings.HasSuffix(p, ".slice") {
			slice = p
		}
		for _, s := range unitSuffixes {
			if strings.HasSuffix(p, s) && len(p) > len(s) {
				l.Unit, l.Slice = clean(p), clean(slice)
			}
		}
	}
	if l.Unit == "" {
		l.Slice = clean(slice)
	}
	return l
}

// clean makes a cgroup name a label value: valid UTF-8, control
// characters (a newline, a tab) as U+FFFD, clipped to maxLabelBytes on a
// rune boundary with "…".
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= maxLabelBytes {
		return s
	}
	cut := maxLabelBytes - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
