package compose

import (
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// testPassword stands in for the admin password the user must supply.
const testPassword = "GRAFANA_ADMIN_PASSWORD=not-a-default"

// repoRoot is the repository, absolute.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// load reads compose.yaml (or file) as docker compose would: interpolated
// from env only, validated against the compose schema, paths resolved.
func load(t *testing.T, file string, env ...string) (*types.Project, error) {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{file},
		cli.WithWorkingDirectory(filepath.Dir(file)),
		cli.WithEnv(env),
		cli.WithResolvedPaths(true),
		cli.WithConsistency(true),
		cli.WithInterpolation(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	return opts.LoadProject(context.Background())
}

func project(t *testing.T) *types.Project {
	t.Helper()
	file, err := filepath.Abs("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := load(t, file, testPassword)
	if err != nil {
		t.Fatalf("loading compose.yaml: %v", err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("compose.yaml has no service %q", name)
	}
	return s
}

// flag returns the value of --name=value in a command, and whether it is there.
func flag(cmd []string, name string) (string, bool) {
	for _, a := range cmd {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// mount returns the service's volume mounted at target.
func mount(t *testing.T, s types.ServiceConfig, target string) types.ServiceVolumeConfig {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target == target {
			return v
		}
	}
	t.Fatalf("service %s mounts nothing at %s", s.Name, target)
	return types.ServiceVolumeConfig{}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestServices(t *testing.T) {
	p := project(t)
	got := p.ServiceNames()
	slices.Sort(got)
	want := []string{"alertmanager", "grafana", "observer", "prometheus"}
	if !slices.Equal(got, want) {
		t.Errorf("services = %v, want %v", got, want)
	}
}

// TestSchemaIsChecked proves the loader rejects what the compose schema does
// not know, so TestServices passing means compose.yaml is valid.
func TestSchemaIsChecked(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(b), "    pid: host\n", "    pid: host\n    privilegd: true\n", 1)
	file := filepath.Join(t.TempDir(), "compose.yaml")
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = load(t, file, testPassword)
	if err == nil || !strings.Contains(err.Error(), "privilegd") {
		t.Errorf("loading compose.yaml with an unknown key: err = %v, want it named", err)
	}
}

// TestGrafanaPasswordRequired: no default admin password ships; without one
// compose refuses to start and says what to set.
func TestGrafanaPasswordRequired(t *testing.T) {
	file, _ := filepath.Abs("compose.yaml")
	_, err := load(t, file)
	if err == nil || !strings.Contains(err.Error(), "set GRAFANA_ADMIN_PASSWORD") {
		t.Errorf("loading without GRAFANA_ADMIN_PASSWORD: err = %v, want the variable named", err)
	}
	p := project(t)
	env := service(t, p, "grafana").Environment
	if v := env["GF_SECURITY_ADMIN_PASSWORD"]; v == nil || *v != "not-a-default" {
		t.Errorf("GF_SECURITY_ADMIN_PASSWORD = %v, want it from GRAFANA_ADMIN_PASSWORD", v)
	}
}

func TestObserverPrivileges(t *testing.T) {
	s := service(t, project(t), "observer")
	if s.Privileged {
		t.Error("observer is privileged: it needs three capabilities, and SYS_ADMIN and SETPCAP for its entrypoint")
	}
	if !slices.Equal(s.CapDrop, []string{"ALL"}) {
		t.Errorf("observer cap_drop = %v, want [ALL]", s.CapDrop)
	}
	if caps := slices.Sorted(slices.Values(s.CapAdd)); !slices.Equal(caps, []string{"BPF", "DAC_OVERRIDE", "PERFMON", "SETPCAP", "SYS_ADMIN"}) {
		t.Errorf("observer cap_add = %v, want BPF, PERFMON, DAC_OVERRIDE (the systemd unit's) and SYS_ADMIN and SETPCAP (the entrypoint's, dropped before the observer starts)", s.CapAdd)
	}
	for _, want := range []string{"apparmor=unconfined", "no-new-privileges:true"} {
		if !slices.Contains(s.SecurityOpt, want) {
			t.Errorf("observer security_opt = %v, want %s", s.SecurityOpt, want)
		}
	}
	for _, opt := range s.SecurityOpt {
		if strings.HasPrefix(opt, "seccomp") {
			t.Errorf("observer security_opt %s: the runtime's default seccomp profile is kept", opt)
		}
	}
	if s.Pid != "host" {
		t.Errorf("observer pid = %q, want host: it watches the host's processes", s.Pid)
	}
	if s.Cgroup != "private" {
		t.Errorf("observer cgroup = %q, want private: the entrypoint nests runs in the container's own cgroup", s.Cgroup)
	}
	for _, v := range s.Volumes {
		if strings.HasPrefix(v.Target, "/sys/fs/cgroup") {
			t.Errorf("observer mounts %s at %s: the host's cgroup tree would put run cgroups at its root", v.Source, v.Target)
		}
	}
	if v := mount(t, s, "/var/lib/thrashscope"); v.Type != types.VolumeTypeVolume {
		t.Errorf("observer data dir is a %s mount, want a named volume", v.Type)
	}
	if dir, _ := flag(s.Command, "data.dir"); dir != "/var/lib/thrashscope" {
		t.Errorf("observer --data.dir = %q, want the volume at /var/lib/thrashscope", dir)
	}
	if s.Build == nil || s.Build.Context != repoRoot(t) || s.Build.Dockerfile != "deploy/container/Dockerfile" {
		t.Errorf("observer build = %+v, want deploy/container/Dockerfile with the repository as context", s.Build)
	}
}

// TestBindMounts: every bind mount comes from the repository, exists and is
// read-only; the one exception is the observer's read-only view of the
// host's cgroup2 tree, where --path.cgroupfs says.
func TestBindMounts(t *testing.T) {
	root := repoRoot(t)
	for _, s := range project(t).Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if dir, _ := flag(s.Command, "path.cgroupfs"); s.Name == "observer" && v.Source == "/sys/fs/cgroup" && v.Target == dir {
				if !v.ReadOnly {
					t.Errorf("observer mounts the host's cgroup tree read-write; it only reads it")
				}
				continue
			}
			rel, err := filepath.Rel(root, v.Source)
			if err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s mounts %s, outside the repository", s.Name, v.Source)
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s mounts %s at %s: %v", s.Name, rel, v.Target, err)
			}
			if !v.ReadOnly {
				t.Errorf("%s mounts %s read-write; configuration is mounted :ro", s.Name, rel)
			}
		}
	}
}

// listenAddresses are what a service serves on: its *listen-address flags
// and Grafana's GF_SERVER_HTTP_ADDR.
func listenAddresses(s types.ServiceConfig) []string {
	var addrs []string
	for _, a := range s.Command {
		if name, v, ok := strings.Cut(a, "="); ok && strings.HasSuffix(name, "listen-address") {
			addrs = append(addrs, v)
		}
	}
	if v := s.Environment["GF_SERVER_HTTP_ADDR"]; v != nil {
		addrs = append(addrs, net.JoinHostPort(*v, *s.Environment["GF_SERVER_HTTP_PORT"]))
	}
	return addrs
}

// TestLoopbackOnly: nothing is published and every service binds the host's
// loopback, so nothing is reachable from another machine.
func TestLoopbackOnly(t *testing.T) {
	want := map[string]int{"observer": 1, "prometheus": 1, "alertmanager": 2, "grafana": 1}
	for _, s := range project(t).Services {
		if s.NetworkMode != "host" {
			t.Errorf("%s network_mode = %q, want host (see the comment in compose.yaml)", s.Name, s.NetworkMode)
		}
		if len(s.Ports) > 0 {
			t.Errorf("%s publishes ports %v: with host networking it binds 127.0.0.1 itself", s.Name, s.Ports)
		}
		addrs := listenAddresses(s)
		if len(addrs) != want[s.Name] {
			t.Errorf("%s listen addresses = %q, want %d set explicitly", s.Name, addrs, want[s.Name])
		}
		for _, a := range addrs {
			host, _, err := net.SplitHostPort(a)
			if s.Name == "alertmanager" && a == "" {
				continue // --cluster.listen-address= turns clustering off
			}
			if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
				t.Errorf("%s listens on %q, not on loopback", s.Name, a)
			}
		}
	}
	if v, ok := flag(service(t, project(t), "alertmanager").Command, "cluster.listen-address"); !ok || v != "" {
		t.Errorf("alertmanager --cluster.listen-address = %q (set: %v), want it empty: one instance needs no gossip port", v, ok)
	}
}

// promConfig is the part of a Prometheus config the kit relies on.
type promConfig struct {
	RuleFiles []string `yaml:"rule_files"`
	Alerting  struct {
		Alertmanagers []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"alertmanagers"`
	} `yaml:"alerting"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// TestPrometheus: the config and the rules are mounted where --config.file
// and rule_files say, the config scrapes the observer and alerts the
// Alertmanager where they listen, and promtool accepts it as mounted.
func TestPrometheus(t *testing.T) {
	p := project(t)
	s := service(t, p, "prometheus")
	root := repoRoot(t)
	configFile, _ := flag(s.Command, "config.file")
	config := mount(t, s, configFile)
	if want := filepath.Join(root, "deploy", "compose", "prometheus.yml"); config.Source != want {
		t.Errorf("%s comes from %s, want %s", configFile, config.Source, want)
	}
	rules := mount(t, s, filepath.Join(filepath.Dir(configFile), "rules"))
	if want := filepath.Join(root, "deploy", "prometheus", "rules"); rules.Source != want {
		t.Errorf("the rules dir comes from %s, want %s", rules.Source, want)
	}

	var cfg promConfig
	readYAML(t, config.Source, &cfg)
	if len(cfg.RuleFiles) == 0 {
		t.Error("the compose Prometheus config loads no rule files")
	}
	for _, f := range cfg.RuleFiles {
		// rule_files are relative to the config file, in the container.
		inContainer := filepath.Join(filepath.Dir(configFile), f)
		rel, err := filepath.Rel(rules.Target, inContainer)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Errorf("rule file %s is not in the mounted rules dir %s", inContainer, rules.Target)
			continue
		}
		if _, err := os.Stat(filepath.Join(rules.Source, rel)); err != nil {
			t.Errorf("rule file %s: %v", inContainer, err)
		}
	}

	observer, _ := flag(service(t, p, "observer").Command, "web.listen-address")
	alertmanager, _ := flag(service(t, p, "alertmanager").Command, "web.listen-address")
	var scrapes, alerts []string
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName == "thrashscope" {
			for _, s := range sc.StaticConfigs {
				scrapes = append(scrapes, s.Targets...)
			}
		}
	}
	for _, am := range cfg.Alerting.Alertmanagers {
		for _, s := range am.StaticConfigs {
			alerts = append(alerts, s.Targets...)
		}
	}
	if !slices.Equal(scrapes, []string{observer}) {
		t.Errorf("job thrashscope scrapes %v, want the observer's %s", scrapes, observer)
	}
	if !slices.Equal(alerts, []string{alertmanager}) {
		t.Errorf("alerts go to %v, want the Alertmanager's %s", alerts, alertmanager)
	}

	// promtool over the container's layout, rebuilt from the mounts.
	promtool := testenv.RequireTool(t, "promtool", "prometheus")
	etc := t.TempDir()
	for _, v := range []types.ServiceVolumeConfig{config, rules} {
		dst := filepath.Join(etc, strings.TrimPrefix(v.Target, filepath.Dir(configFile)))
		if err := os.Symlink(v.Source, dst); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(promtool, "check", "config", filepath.Join(etc, filepath.Base(configFile))).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}

// TestPrometheusConfigMatchesShipped: the compose config is
// deploy/prometheus/prometheus.yml with an Alertmanager, nothing else, so a
// change to one that misses the other fails here.
func TestPrometheusConfigMatchesShipped(t *testing.T) {
	var compose, shipped map[string]any
	readYAML(t, "prometheus.yml", &compose)
	readYAML(t, filepath.Join("..", "prometheus", "prometheus.yml"), &shipped)
	if _, ok := compose["alerting"]; !ok {
		t.Error("the compose Prometheus config has no alerting section")
	}
	delete(compose, "alerting")
	delete(shipped, "alerting")
	if !reflect.DeepEqual(compose, shipped) {
		t.Errorf("deploy/compose/prometheus.yml differs from deploy/prometheus/prometheus.yml beyond alerting:\ncompose: %v\nshipped: %v", compose, shipped)
	}
}

func TestAlertmanager(t *testing.T) {
	s := service(t, project(t), "alertmanager")
	configFile, _ := flag(s.Command, "config.file")
	config := mount(t, s, configFile)
	if want := filepath.Join(repoRoot(t), "deploy", "compose", "alertmanager.yml"); config.Source != want {
		t.Errorf("%s comes from %s, want %s", configFile, config.Source, want)
	}
	amtool := testenv.RequireTool(t, "amtool", "prometheus-alertmanager")
	out, err := exec.Command(amtool, "check-config", config.Source).CombinedOutput()
	if err != nil {
		t.Errorf("amtool check-config: %v\n%s", err, out)
	}
}

// TestGrafana: both provisioning dirs are mounted where Grafana reads them,
// the dashboard providers' paths are mounts of dashboards/ holding the
// dashboards, and the data source reaches the compose Prometheus.
func TestGrafana(t *testing.T) {
	p := project(t)
	s := service(t, p, "grafana")
	dashboards := filepath.Join(repoRoot(t), "dashboards")
	for _, kind := range []string{"datasources", "dashboards"} {
		v := mount(t, s, "/etc/grafana/provisioning/"+kind)
		if want := filepath.Join(dashboards, "provisioning", kind); v.Source != want {
			t.Errorf("provisioning/%s comes from %s, want %s", kind, v.Source, want)
		}
	}

	providers, _ := filepath.Glob(filepath.Join(dashboards, "provisioning", "dashboards", "*.y*ml"))
	if len(providers) == 0 {
		t.Fatalf("no dashboard providers in %s/provisioning/dashboards", dashboards)
	}
	for _, f := range providers {
		var cfg struct {
			Providers []struct {
				Name    string `yaml:"name"`
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		readYAML(t, f, &cfg)
		for _, pr := range cfg.Providers {
			v := mount(t, s, pr.Options.Path)
			if v.Source != dashboards {
				t.Errorf("provider %s reads %s, mounted from %s, want %s", pr.Name, pr.Options.Path, v.Source, dashboards)
			}
			if json, _ := filepath.Glob(filepath.Join(v.Source, "*.json")); len(json) == 0 {
				t.Errorf("provider %s reads %s, which holds no dashboards", pr.Name, v.Source)
			}
		}
	}

	prometheus, _ := flag(service(t, p, "prometheus").Command, "web.listen-address")
	_, promPort, _ := net.SplitHostPort(prometheus)
	sources, _ := filepath.Glob(filepath.Join(dashboards, "provisioning", "datasources", "*.y*ml"))
	found := 0
	for _, f := range sources {
		var cfg struct {
			Datasources []struct {
				Name, Type, URL string
			} `yaml:"datasources"`
		}
		readYAML(t, f, &cfg)
		for _, ds := range cfg.Datasources {
			if ds.Type != "prometheus" {
				continue
			}
			found++
			// Grafana expands $VAR in provisioning files from its environment.
			raw := os.Expand(ds.URL, func(k string) string {
				if v := s.Environment[k]; v != nil {
					return *v
				}
				return ""
			})
			u, err := url.Parse(raw)
			if err != nil {
				t.Errorf("data source %s: %v", ds.Name, err)
				continue
			}
			loopback := u.Hostname() == "localhost" || net.ParseIP(u.Hostname()).IsLoopback()
			if !loopback || u.Port() != promPort {
				t.Errorf("data source %s points at %q (%s); with host networking Prometheus is at %s", ds.Name, raw, ds.URL, prometheus)
			}
		}
	}
	if found == 0 {
		t.Errorf("no Prometheus data source in %s/provisioning/datasources", dashboards)
	}
}

// TestObserverCommand runs the real observer with the compose command line:
// every flag exists and the configuration passes its checks. On a cgroup v1
// host like this one the entrypoint passes the flags through unchanged.
func TestObserverCommand(t *testing.T) {
	testenv.RequirePrivileged(t)
	s := service(t, project(t), "observer")
	args := []string{"--check"}
	for _, a := range s.Command {
		if strings.HasPrefix(a, "--data.dir=") {
			a = "--data.dir=" + t.TempDir()
		}
		if strings.HasPrefix(a, "--path.cgroupfs=") {
			h, err := cgroup.UnifiedHierarchy("/proc")
			if err != nil {
				t.Fatalf("no cgroup2 mount on this host to stand in for the host's: %v", err)
			}
			a = "--path.cgroupfs=" + h.Point // the host's, mounted there in the container
		}
		args = append(args, a)
	}
	out, err := exec.Command(testenv.Binary(t, "observer"), args...).CombinedOutput()
	if err != nil {
		t.Errorf("observer %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
