package kubernetes

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

const (
	namespace   = "thrashscope"
	tokenSecret = "thrashscope-api-token"
)

// objects are the kit's manifests, each decoded into its upstream type.
type objects struct {
	namespaces      []corev1.Namespace
	serviceAccounts []corev1.ServiceAccount
	daemonSets      []appsv1.DaemonSet
	services        []corev1.Service
	serviceMonitors []monitoringv1.ServiceMonitor
	prometheusRules []monitoringv1.PrometheusRule
	networkPolicies []networkingv1.NetworkPolicy
}

// documents splits a multi-document YAML file.
func documents(t *testing.T, b []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(b []byte) []byte {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAll(b, nil)
}

// decode strictly decodes one manifest into the type its kind names: an
// unknown or duplicated field is an error, as kubectl --validate=strict has it.
func decode(doc []byte, into *objects) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	strict := func(v any) error { return yaml.UnmarshalStrict(doc, v) }
	var err error
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		var o corev1.Namespace
		if err = strict(&o); err == nil {
			into.namespaces = append(into.namespaces, o)
		}
	case "v1 ServiceAccount":
		var o corev1.ServiceAccount
		if err = strict(&o); err == nil {
			into.serviceAccounts = append(into.serviceAccounts, o)
		}
	case "apps/v1 DaemonSet":
		var o appsv1.DaemonSet
		if err = strict(&o); err == nil {
			into.daemonSets = append(into.daemonSets, o)
		}
	case "v1 Service":
		var o corev1.Service
		if err = strict(&o); err == nil {
			into.services = append(into.services, o)
		}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		var o monitoringv1.ServiceMonitor
		if err = strict(&o); err == nil {
			into.serviceMonitors = append(into.serviceMonitors, o)
		}
	case "monitoring.coreos.com/v1 PrometheusRule":
		var o monitoringv1.PrometheusRule
		if err = strict(&o); err == nil {
			into.prometheusRules = append(into.prometheusRules, o)
		}
	case "networking.k8s.io/v1 NetworkPolicy":
		var o networkingv1.NetworkPolicy
		if err = strict(&o); err == nil {
			into.networkPolicies = append(into.networkPolicies, o)
		}
	default:
		return errors.New("unexpected apiVersion and kind: " + tm.APIVersion + " " + tm.Kind)
	}
	return err
}

// load decodes every manifest of the kit.
func load(t *testing.T) objects {
	t.Helper()
	files, _ := filepath.Glob("*.yaml")
	if len(files) < 3 {
		t.Fatalf("manifests: %v", files)
	}
	var o objects
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range documents(t, b) {
			if err := decode(doc, &o); err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return o
}

func one[T any](t *testing.T, what string, list []T) T {
	t.Helper()
	if len(list) != 1 {
		t.Fatalf("%d %ss in the kit, want 1", len(list), what)
	}
	return list[0]
}

// TestStrictDecoding proves decode rejects a field its type lacks, so
// load's success means every manifest is valid for its API.
func TestStrictDecoding(t *testing.T) {
	b, err := os.ReadFile("observer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(b), "      hostPID: true\n", "      hostPID: true\n      hostPIDs: true\n", 1)
	var o objects
	var errs []error
	for _, doc := range documents(t, []byte(bad)) {
		if err := decode(doc, &o); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "hostPIDs") {
		t.Errorf("decoding observer.yaml with an unknown field: errors %v, want one naming it", errs)
	}
}

func TestNamespaces(t *testing.T) {
	o := load(t)
	ns := one(t, "Namespace", o.namespaces)
	if ns.Name != namespace {
		t.Errorf("namespace %q, want %q", ns.Name, namespace)
	}
	metas := []metav1.ObjectMeta{}
	for _, x := range o.serviceAccounts {
		metas = append(metas, x.ObjectMeta)
	}
	for _, x := range o.daemonSets {
		metas = append(metas, x.ObjectMeta)
	}
	for _, x := range o.services {
		metas = append(metas, x.ObjectMeta)
	}
	for _, x := range o.serviceMonitors {
		metas = append(metas, x.ObjectMeta)
	}
	for _, x := range o.prometheusRules {
		metas = append(metas, x.ObjectMeta)
	}
	for _, m := range metas {
		if m.Namespace != namespace {
			t.Errorf("%s is in namespace %q, want %q", m.Name, m.Namespace, namespace)
		}
	}
}

// unitCapabilities are the systemd unit's capabilities, the proven minimum,
// without the CAP_ prefix.
func unitCapabilities(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "systemd", "thrashscope.service"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CapabilityBoundingSet=(.*)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no CapabilityBoundingSet= in deploy/systemd/thrashscope.service")
	}
	var caps []string
	for _, c := range strings.Fields(string(m[1])) {
		caps = append(caps, strings.TrimPrefix(c, "CAP_"))
	}
	slices.Sort(caps)
	return caps
}

func observer(t *testing.T, ds appsv1.DaemonSet) corev1.Container {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "observer" {
			return c
		}
	}
	t.Fatal("the DaemonSet has no container named observer")
	return corev1.Container{}
}

func flag(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func TestDaemonSet(t *testing.T) {
	o := load(t)
	ds := one(t, "DaemonSet", o.daemonSets)
	pod := ds.Spec.Template.Spec
	c := observer(t, ds)

	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("DaemonSet selector %v does not match its pods' labels %v (%v)", ds.Spec.Selector, ds.Spec.Template.Labels, err)
	}
	if !pod.HostPID {
		t.Error("hostPID is off: the observer would see its own pod's processes only")
	}
	if pod.HostNetwork {
		t.Error("hostNetwork is on: the pod network suffices and keeps the port off the node's addresses")
	}
	if sa := one(t, "ServiceAccount", o.serviceAccounts); pod.ServiceAccountName != sa.Name {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, sa.Name)
	}
	if pod.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("nodeSelector %v, want kubernetes.io/os: linux", pod.NodeSelector)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Key == "" && tl.Operator == corev1.TolerationOpExists && tl.Effect == ""
	}) {
		t.Errorf("tolerations %v: want one that tolerates every taint, so every node runs an observer", pod.Tolerations)
	}

	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("the observer container has no securityContext capabilities")
	}
	var add []string
	for _, cp := range sc.Capabilities.Add {
		add = append(add, string(cp))
	}
	slices.Sort(add)
	if want := unitCapabilities(t); !slices.Equal(add, want) {
		t.Errorf("capabilities added %v, want the systemd unit's %v", add, want)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities dropped %v, want ALL", sc.Capabilities.Drop)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("the observer is privileged; its capabilities suffice")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("runAsUser is not 0: clear_refs of root's processes needs root")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	}

	// The port it listens on is the named port the probes, the Service and
	// the ServiceMonitor use.
	listen := flag(c.Args, "web.listen-address")
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatalf("--web.listen-address=%q: %v", listen, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		t.Errorf("--web.listen-address=%q is loopback: Prometheus could not scrape it", listen)
	}
	port, _ := strconv.Atoi(portStr)
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || int(c.Ports[0].ContainerPort) != port {
		t.Errorf("container ports %v, want one named metrics on %d", c.Ports, port)
	}
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[name]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe %+v, want GET %s on port metrics", name, p, want)
		}
	}
}

// TestTokenWiring: the token file the observer reads is the Secret's key,
// mounted read-only, and the Secret is the one the install comment creates.
func TestTokenWiring(t *testing.T) {
	ds := one(t, "DaemonSet", load(t).daemonSets)
	c := observer(t, ds)
	tokenFile := flag(c.Args, "web.api-token-file")
	if tokenFile == "" {
		t.Fatal("no --web.api-token-file: the observer refuses to listen beyond loopback without one")
	}
	var mnt *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if strings.HasPrefix(tokenFile, m.MountPath+"/") {
			mnt = &c.VolumeMounts[i]
		}
	}
	if mnt == nil {
		t.Fatalf("--web.api-token-file=%s is on no volume mount", tokenFile)
	}
	if !mnt.ReadOnly {
		t.Errorf("volume %s is mounted read-write", mnt.Name)
	}
	var vol *corev1.Volume
	for i, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == mnt.Name {
			vol = &ds.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil {
		t.Fatalf("volume %s is not a Secret volume", mnt.Name)
	}
	if vol.Secret.SecretName != tokenSecret {
		t.Errorf("token Secret %q, want %q", vol.Secret.SecretName, tokenSecret)
	}
	rel := strings.TrimPrefix(tokenFile, mnt.MountPath+"/")
	if len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Path != rel {
		t.Errorf("Secret items %v, want one projected to %s", vol.Secret.Items, rel)
	}
	b, _ := os.ReadFile("observer.yaml")
	create := "kubectl -n " + namespace + " create secret generic " + tokenSecret + " --from-literal=" + vol.Secret.Items[0].Key + "="
	if !strings.Contains(string(b), create) {
		t.Errorf("observer.yaml does not tell how to create the Secret (%q...)", create)
	}
}

// TestScraping: Service and ServiceMonitor reach the DaemonSet's port, the
// job is named as the alerts expect, and scrapes are as frequent as the
// rules need.
func TestScraping(t *testing.T) {
	o := load(t)
	ds := one(t, "DaemonSet", o.daemonSets)
	svc := one(t, "Service", o.services)
	sm := one(t, "ServiceMonitor", o.serviceMonitors)
	c := observer(t, ds)

	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service clusterIP %q, want None (headless: one endpoint per node)", svc.Spec.ClusterIP)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("Service selector %v does not match the pods' labels %v", svc.Spec.Selector, ds.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("Service ports %v, want one", svc.Spec.Ports)
	}
	sp := svc.Spec.Ports[0]
	if sp.TargetPort.String() != c.Ports[0].Name || sp.Port != c.Ports[0].ContainerPort {
		t.Errorf("Service port %d -> %s, want %d -> %s", sp.Port, sp.TargetPort.String(), c.Ports[0].ContainerPort, c.Ports[0].Name)
	}

	sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not match the Service's labels %v (%v)", sm.Spec.Selector, svc.Labels, err)
	}
	if ns := sm.Spec.NamespaceSelector.MatchNames; len(ns) > 0 && !slices.Contains(ns, svc.Namespace) {
		t.Errorf("ServiceMonitor namespaces %v miss the Service's %s", ns, svc.Namespace)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != sp.Name {
		t.Fatalf("ServiceMonitor endpoints %v, want one on the Service's port %s", sm.Spec.Endpoints, sp.Name)
	}
	ep := sm.Spec.Endpoints[0]
	interval, err1 := time.ParseDuration(string(ep.Interval))
	timeout, err2 := time.ParseDuration(string(ep.ScrapeTimeout))
	if err1 != nil || err2 != nil || interval > 5*time.Second || timeout > interval {
		t.Errorf("scrape interval %q, timeout %q: the rules' 10s windows need an interval of 5s or less, and the timeout within it", ep.Interval, ep.ScrapeTimeout)
	}

	// The operator names the job after the Service unless jobLabel says
	// otherwise; ThrashscopeDown looks for that job.
	rules, err := os.ReadFile(RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`up\{job="([^"]+)"\}`).FindSubmatch(rules)
	if m == nil {
		t.Fatalf("%s: no up{job=...} in ThrashscopeDown", RulesFile)
	}
	if sm.Spec.JobLabel != "" || svc.Name != string(m[1]) {
		t.Errorf("the job would be %q (Service %s, jobLabel %q); the alerts expect job=%q", svc.Name, svc.Name, sm.Spec.JobLabel, m[1])
	}
}

// /metrics (every pid, command and pod UID of the node) is reachable only
// from Prometheus: a NetworkPolicy selects the observer's pods, admits
// ingress only on the metrics port, and only from Prometheus's pods, in
// the namespace the ServiceMonitor's Prometheus runs in.
func TestMetricsOnlyToPrometheus(t *testing.T) {
	o := load(t)
	ds := one(t, "DaemonSet", o.daemonSets)
	np := one(t, "NetworkPolicy", o.networkPolicies)
	c := observer(t, ds)
	if ds.Spec.Template.Spec.HostNetwork {
		t.Fatal("the observer's pods use the host's network, which no NetworkPolicy covers")
	}
	if np.Namespace != ds.Namespace {
		t.Errorf("NetworkPolicy in %q, the DaemonSet in %q", np.Namespace, ds.Namespace)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("NetworkPolicy podSelector %v does not select the observer's pods %v (%v)", np.Spec.PodSelector, ds.Spec.Template.Labels, err)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policy types %v, want Ingress", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 1 {
		t.Fatalf("%d ingress rules, want one", len(np.Spec.Ingress))
	}
	in := np.Spec.Ingress[0]
	if len(in.Ports) != 1 || in.Ports[0].Port == nil || in.Ports[0].Port.String() != c.Ports[0].Name {
		t.Errorf("ingress ports %v, want the metrics port %s alone", in.Ports, c.Ports[0].Name)
	}
	if len(in.From) != 1 {
		t.Fatalf("ingress from %v, want one peer", in.From)
	}
	peer := in.From[0]
	if peer.IPBlock != nil || peer.PodSelector == nil || peer.NamespaceSelector == nil ||
		len(peer.PodSelector.MatchLabels) == 0 || len(peer.NamespaceSelector.MatchLabels) == 0 {
		t.Errorf("ingress from %+v, want Prometheus's pods by label in a namespace by label, no address block", peer)
	}
	if peer.PodSelector.MatchLabels["app.kubernetes.io/name"] != "prometheus" {
		t.Errorf("the peer pods %v, want app.kubernetes.io/name=prometheus", peer.PodSelector.MatchLabels)
	}
}

// TestPrometheusRuleIsGenerated: prometheusrule.yaml is what the generator
// makes of the rules file now, and holds the same groups, so the two never
// drift.
func TestPrometheusRuleIsGenerated(t *testing.T) {
	rules, err := os.ReadFile(RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	want, err := PrometheusRule(rules)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(PrometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run make generate (or go generate ./deploy/kubernetes)", PrometheusRuleFile)
	}

	var file struct {
		Groups []monitoringv1.RuleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(rules, &file); err != nil {
		t.Fatalf("%s does not fit the PrometheusRule schema: %v", RulesFile, err)
	}
	pr := one(t, "PrometheusRule", load(t).prometheusRules)
	if !reflect.DeepEqual(pr.Spec.Groups, file.Groups) {
		t.Errorf("PrometheusRule groups differ from %s", RulesFile)
	}
	var alerts int
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts++
			}
		}
	}
	if alerts < 6 {
		t.Errorf("%d alerts in the PrometheusRule, want thrashscope's six or more", alerts)
	}
}

// TestGeneratorRejects: input that is not a rules file is an error naming
// the problem, not an empty PrometheusRule.
func TestGeneratorRejects(t *testing.T) {
	for in, want := range map[string]string{
		"groups: []\n":                     "no groups",
		"groups:\n  - name: a\nextra: 1\n": `unexpected top-level key "extra"`,
		"- a\n":                            "mapping",
		"groups: [\n":                      "rules file",
	} {
		if _, err := PrometheusRule([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("PrometheusRule(%q) error = %v, want %q", in, err, want)
		}
	}
}

// TestObserverArgs runs the real observer with the DaemonSet's arguments:
// every flag exists and the configuration passes its checks, and without the
// token the listen address is refused.
func TestObserverArgs(t *testing.T) {
	testenv.RequirePrivileged(t)
	c := observer(t, one(t, "DaemonSet", load(t).daemonSets))
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := testenv.Binary(t, "observer")
	var args, noToken []string
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--web.api-token-file=") {
			args = append(args, "--web.api-token-file="+token)
			continue
		}
		if strings.HasPrefix(a, "--path.cgroupfs=") {
			a = "--path.cgroupfs=" + hostCgroupfs(t) // the node's, mounted there in the pod
		}
		args = append(args, a)
		noToken = append(noToken, a)
	}
	// The image has no data dir (read-only root): point it at a temporary one.
	args = append(args, "--check", "--data.dir="+t.TempDir())
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Errorf("observer %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	out, err := exec.Command(bin, append(noToken, "--check")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "listens beyond loopback") {
		t.Errorf("observer without the token file: %v\n%s\nwant the listen address refused", err, out)
	}
}

// hostCgroupfs is this host's cgroup2 mount, which the pod sees at
// --path.cgroupfs.
func hostCgroupfs(t *testing.T) string {
	t.Helper()
	h, err := cgroup.UnifiedHierarchy("/proc")
	if err != nil {
		t.Fatalf("no cgroup2 mount on this host to stand in for the node's: %v", err)
	}
	return h.Point
}
