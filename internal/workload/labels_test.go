package workload

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/thrashscope/thrashscope/internal/labelvalue"
)

// Real paths of both cgroup drivers and of systemd, as the kernel shows
// them in /proc/<pid>/cgroup (0::<path>).
func TestParse(t *testing.T) {
	const (
		uid  = "3e1d7a2b-54c8-4f0e-9b1a-0c2d3e4f5a6b"
		uidU = "3e1d7a2b_54c8_4f0e_9b1a_0c2d3e4f5a6b"
		cid  = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	)
	for _, c := range []struct {
		path string
		want Labels
	}{
		{"/", Labels{Cgroup: "/"}},
		{"", Labels{Cgroup: "/"}},
		{"/system.slice/nginx.service", Labels{Cgroup: "/system.slice/nginx.service", Unit: "nginx.service", Slice: "system.slice"}},
		{"/system.slice", Labels{Cgroup: "/system.slice", Slice: "system.slice"}},
		{"/user.slice/user-1000.slice/session-2.scope", Labels{Cgroup: "/user.slice/user-1000.slice/session-2.scope", Unit: "session-2.scope", Slice: "user-1000.slice"}},
		{"/user.slice/user-1000.slice/user@1000.service/app.slice/app-firefox.scope",
			Labels{Cgroup: "/user.slice/user-1000.slice/user@1000.service/app.slice/app-firefox.scope", Unit: "user@1000.service", Slice: "user-1000.slice"}},
		{"/system.slice/docker-" + cid + ".scope", Labels{Cgroup: "/system.slice/docker-" + cid + ".scope", Unit: "docker-" + cid + ".scope", Slice: "system.slice"}},
		// Kubernetes, systemd driver, containerd.
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			Labels{Cgroup: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
				Unit: "cri-containerd-" + cid + ".scope", Slice: "kubepods-burstable-pod" + uidU + ".slice", PodUID: uid, ContainerID: cid, QoS: "burstable"}},
		// Guaranteed pods sit right under kubepods; CRI-O names its scope crio-.
		{"/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-" + cid + ".scope",
			Labels{Cgroup: "/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-" + cid + ".scope",
				Unit: "crio-" + cid + ".scope", Slice: "kubepods-pod" + uidU + ".slice", PodUID: uid, ContainerID: cid, QoS: "guaranteed"}},
		// The pod's own level, without a container.
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice",
			Labels{Cgroup: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice",
				Slice: "kubepods-besteffort-pod" + uidU + ".slice", PodUID: uid, QoS: "besteffort"}},
		// Kubernetes, cgroupfs driver: containerd's bare id, CRI-O's crio-<id>.
		{"/kubepods/burstable/pod" + uid + "/" + cid, Labels{Cgroup: "/kubepods/burstable/pod" + uid + "/" + cid, PodUID: uid, ContainerID: cid, QoS: "burstable"}},
		{"/kubepods/pod" + uid + "/crio-" + cid, Labels{Cgroup: "/kubepods/pod" + uid + "/crio-" + cid, PodUID: uid, ContainerID: cid, QoS: "guaranteed"}},
		{"/kubepods/besteffort/pod" + uid, Labels{Cgroup: "/kubepods/besteffort/pod" + uid, PodUID: uid, QoS: "besteffort"}},
		// Under a kubelet --cgroup-root that is not given: names only.
		{"/kubelet/kubepods/besteffort/pod" + uid + "/" + cid, Labels{Cgroup: "/kubelet/kubepods/besteffort/pod" + uid + "/" + cid}},
		// Forged: the kubelet's shape under a group a user may make, or
		// anywhere but right under its root; a unit inside a unit.
		{"/hostile-test-spoof/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			Labels{Cgroup: "/hostile-test-spoof/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope"}},
		{"/user.slice/user-1000.slice/user@1000.service/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			Labels{Cgroup: "/user.slice/user-1000.slice/user@1000.service/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
				Unit: "user@1000.service", Slice: "user-1000.slice"}},
		{"/kubepods/burstable/x/pod" + uid, Labels{Cgroup: "/kubepods/burstable/x/pod" + uid, QoS: "burstable"}},
		{"/system.slice/db.service/evil.service", Labels{Cgroup: "/system.slice/db.service/evil.service", Unit: "db.service", Slice: "system.slice"}},
		// Shapes that look alike but are not: no pod level, a short id, a pod outside kubepods.
		{"/kubepods/burstable/" + cid, Labels{Cgroup: "/kubepods/burstable/" + cid, QoS: "burstable"}},
		{"/kubepods/pod" + uid + "/abc123", Labels{Cgroup: "/kubepods/pod" + uid + "/abc123", PodUID: uid, QoS: "guaranteed"}},
		{"/system.slice/pod" + uid, Labels{Cgroup: "/system.slice/pod" + uid, Slice: "system.slice"}},
		{"/thrashscope-run-x/consumer-00", Labels{Cgroup: "/thrashscope-run-x/consumer-00"}},
		{"/.service", Labels{Cgroup: "/.service"}},
	} {
		if got := Parse(c.path); got != c.want {
			t.Errorf("Parse(%q)\n got %+v\nwant %+v", c.path, got, c.want)
		}
	}
}

// A hostile cgroup name (invalid UTF-8, a newline and quotes, or very
// long) becomes a label value that is valid, printable and bounded.
func TestParseHostileNames(t *testing.T) {
	for _, name := range []string{
		"/bad\xff\xfename.service",
		"/evil\"} 1\nthrashscope_fake 1\n.service",
		"/" + strings.Repeat("é", 4000) + ".service",
	} {
		l := Parse(name)
		for _, v := range []string{l.Cgroup, l.Unit} {
			if !utf8.ValidString(v) || strings.ContainsAny(v, "\n\r\x00") || len(v) > labelvalue.Max+35 {
				t.Errorf("Parse(%q): label %q is not valid, printable and at most %d bytes", name, v, labelvalue.Max+35)
			}
		}
		if l.Unit == "" {
			t.Errorf("Parse(%q): the unit was lost", name)
		}
	}
}

// Under the kubelet's own cgroup root (--cgroup-root), as kind and k3s
// nest it, once the root is given.
func TestParseUnderAKubeletRoot(t *testing.T) {
	const (
		uid  = "3e1d7a2b-54c8-4f0e-9b1a-0c2d3e4f5a6b"
		uidU = "3e1d7a2b_54c8_4f0e_9b1a_0c2d3e4f5a6b"
		cid  = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	)
	tr := Trust{KubeletRoots: []string{"/kubelet.slice", "/kubelet/"}}
	for _, c := range []struct {
		path string
		want Labels
	}{
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			Labels{Cgroup: "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
				Unit: "cri-containerd-" + cid + ".scope", Slice: "kubelet-kubepods-burstable-pod" + uidU + ".slice", PodUID: uid, ContainerID: cid, QoS: "burstable"}},
		{"/kubelet/kubepods/besteffort/pod" + uid + "/" + cid, Labels{Cgroup: "/kubelet/kubepods/besteffort/pod" + uid + "/" + cid, PodUID: uid, ContainerID: cid, QoS: "besteffort"}},
		// The default root is no longer trusted once roots are given.
		{"/kubepods/besteffort/pod" + uid, Labels{Cgroup: "/kubepods/besteffort/pod" + uid}},
	} {
		if got := tr.Parse(c.path); got != c.want {
			t.Errorf("Parse(%q)\n got %+v\nwant %+v", c.path, got, c.want)
		}
	}
}

// FuzzParseIsOneToOne: two different cgroup paths never give one cgroup
// label, so their series never merge.
func FuzzParseIsOneToOne(f *testing.F) {
	for _, p := range []string{"/hostile-test-\x01", "/hostile-test-\xff", "/" + strings.Repeat("a", 240) + "x", "/a.service", "/a\uFFFD"} {
		f.Add(p, p[:len(p)-1]+"\x02")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		// Parse reads a path: "/a/" and "a" are one cgroup.
		if na, nb := "/"+strings.Trim(a, "/"), "/"+strings.Trim(b, "/"); na != nb && Parse(a).Cgroup == Parse(b).Cgroup {
			t.Fatalf("Parse(%q) and Parse(%q) both give cgroup %q", a, b, Parse(a).Cgroup)
		}
	})
}
