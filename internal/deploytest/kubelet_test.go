package main

import (
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// TestStaticPodIsTheDaemonSetsTemplate: the static pod the kubelet kit
// runs decodes strictly as a Pod, and differs from the DaemonSet's pod
// template only where a standalone kubelet needs it: the image built, no
// ServiceAccount, the token Secret a host directory.
func TestStaticPodIsTheDaemonSetsTemplate(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pod, svc, err := podFromDaemonSet(repo)
	if err != nil {
		t.Fatal(err)
	}
	// The template before the changes, for comparison.
	before, err := sigsyaml.Marshal(pod.template)
	if err != nil {
		t.Fatal(err)
	}
	var tmpl corev1.PodTemplateSpec
	if err := sigsyaml.UnmarshalStrict(before, &tmpl); err != nil {
		t.Fatalf("the DaemonSet's template: %v", err)
	}
	manifest, err := pod.manifest("/run/token-dir")
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.Pod
	if err := sigsyaml.UnmarshalStrict(manifest, &got); err != nil {
		t.Fatalf("the static pod does not decode as a Pod: %v\n%s", err, manifest)
	}
	if got.Name != "thrashscope" || got.Namespace != "thrashscope" {
		t.Errorf("static pod %s/%s, want thrashscope/thrashscope", got.Namespace, got.Name)
	}
	if got.Spec.ServiceAccountName != "" {
		t.Errorf("serviceAccountName %q kept: a static pod cannot have one", got.Spec.ServiceAccountName)
	}
	if len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Image != observerImage {
		t.Fatalf("containers %+v, want one running %s", got.Spec.Containers, observerImage)
	}
	secrets := 0
	for _, v := range got.Spec.Volumes {
		if v.Secret != nil {
			secrets++
		}
		if v.Name == "api-token" && (v.HostPath == nil || v.HostPath.Path != "/run/token-dir") {
			t.Errorf("api-token volume %+v, want the host directory /run/token-dir", v)
		}
	}
	if secrets > 0 {
		t.Error("a Secret volume is left: a static pod cannot fetch it")
	}
	// Everything else as the DaemonSet has it.
	want := tmpl.Spec.DeepCopy()
	want.ServiceAccountName = ""
	want.Containers[0].Image = observerImage
	for i := range want.Volumes {
		if want.Volumes[i].Secret != nil {
			want.Volumes[i].VolumeSource = got.Spec.Volumes[i].VolumeSource
		}
	}
	if !reflect.DeepEqual(*want, got.Spec) {
		t.Errorf("the static pod's spec differs from the DaemonSet's template beyond the image, ServiceAccount and token:\n%s", manifest)
	}
	if port, err := pod.containerPort(svc.targetPort); err != nil || port != 9752 {
		t.Errorf("the Service's target port %q is container port %d, %v; want 9752", svc.targetPort, port, err)
	}
}

// --prepare may run beside make test or the kernel matrix: what the tests
// make is not a kit's leftover there, and anything an engine makes still is.
func TestBesideTheTests(t *testing.T) {
	for _, c := range []struct {
		leftover string
		tests    bool
	}{
		{"cgroup /sys/fs/cgroup/unified/thrashscope-run-20261128-230008-44efc5/thrashscope-consumer-00", true},
		{"process 11766 /tmp/thrashscope-test-bin/observer", true},
		{"process 14805 /tmp/thrashscope-test-bin/loadgen", true},
		{"cgroup /sys/fs/cgroup/memory/libpod_parent/libpod-conmon-1f2e", false},
		{"process 200 /usr/bin/conmon", false},
		{"file /var/lib/containers/storage", false},
		{"mount /run/thrashscope-deploy/podman-run/overlay", false},
	} {
		if got := besideTheTests(c.leftover); got != c.tests {
			t.Errorf("besideTheTests(%q) = %v, want %v", c.leftover, got, c.tests)
		}
	}
}
