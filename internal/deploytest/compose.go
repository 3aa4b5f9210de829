package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/thrashscope/thrashscope/internal/run"
)

// podmanCompose is the podman-compose this test uses, from PyPI: Debian
// 12's 1.0.3 fails every service of a host-network kit ("cannot set
// multiple networks without bridge network mode") and drops pid: host.
const podmanCompose = "podman-compose==1.6.0"

// composeSpec is the run the compose test induces: the detection
// benchmark's, small enough for this machine, thrashing within seconds.
const composeSpec = `{"preset":"e4","scale":0.1,"writes_per_cycle":10000}`

// ensurePodmanCompose installs podman-compose into a virtual environment
// in the cache.
func (e *env) ensurePodmanCompose() (string, error) {
	venv := filepath.Join(e.cache, "venv")
	bin := filepath.Join(venv, "bin", "podman-compose")
	if out, err := e.run(bin, "version"); err == nil && strings.Contains(out, "1.6.0") {
		return bin, nil
	}
	if _, err := e.run("python3", "-m", "venv", "--clear", venv); err != nil {
		return "", err
	}
	if _, err := e.run(filepath.Join(venv, "bin", "pip"), "install", "--quiet", podmanCompose); err != nil {
		return "", fmt.Errorf("installing %s from PyPI: %w", podmanCompose, err)
	}
	return bin, nil
}

// proveCompose brings up the compose kit's observer, Prometheus and
// Alertmanager under podman-compose, checks the target and the rules,
// induces a small run through the observer's API and waits for
// ThrashscopeHostThrashing in Alertmanager.
func (e *env) proveCompose() ([]string, error) {
	if err := portsFree(9090, 9093, 9752); err != nil {
		return nil, err
	}
	compose, err := e.composeKit()
	if err != nil {
		return nil, err
	}
	services := []string{"observer", "prometheus", "alertmanager"}
	e.defer_(func() error {
		_, err := compose("down", "--volumes", "--timeout", "30")
		return err
	})
	start := time.Now()
	if _, err := compose(append([]string{"up", "-d"}, services...)...); err != nil {
		return nil, err
	}
	var figures []string
	_, err = e.poll("the compose observer's /metrics with every probe up", 90*time.Second, func() error {
		scrape, err := get("http://127.0.0.1:9752/metrics")
		if err != nil {
			return err
		}
		return probesUp(scrape)
	})
	if err != nil {
		logs, _ := compose("logs", "--tail", "20", "observer")
		return nil, fmt.Errorf("%w\nobserver log:\n%s", err, logs)
	}
	figures = append(figures, fmt.Sprintf("observer up with 5 probes %s after up", (time.Since(start)).Round(100*time.Millisecond)))
	line, err := e.composeSecurity()
	if err != nil {
		return figures, err
	}
	figures = append(figures, line)
	line, err = e.composePrometheus(compose)
	if err != nil {
		return figures, err
	}
	figures = append(figures, line)
	line, err = e.composeAlert(compose)
	if err != nil {
		return figures, err
	}
	return append(figures, line), nil
}

// composeSecurity holds the kit's observer to what compose.yaml says of it,
// as the kernel sees the process: the three capabilities without the
// entrypoint's SYS_ADMIN and SETPCAP, the runtime's seccomp filter, no new
// privileges.
func (e *env) composeSecurity() (string, error) {
	out, err := e.podman("inspect", "--format", "{{.State.Pid}}", "thrashscope_observer_1")
	if err != nil {
		return "", err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return "", fmt.Errorf("the compose observer's pid: %q: %w", out, err)
	}
	caps, seccomp, nnp, err := securityOf(pid)
	if err != nil {
		return "", err
	}
	want := uint64(1)<<capBPF | 1<<capPerfmon | 1<<capDACOverride
	if caps != want || seccomp != 2 || nnp != 1 {
		return "", fmt.Errorf("the compose observer (pid %d) runs with CapEff %#x, Seccomp %d, NoNewPrivs %d; compose.yaml means %#x (BPF, PERFMON, DAC_OVERRIDE), 2 (the runtime's filter), 1",
			pid, caps, seccomp, nnp, want)
	}
	return "observer not privileged: CapEff exactly BPF, PERFMON, DAC_OVERRIDE; seccomp filter (mode 2); no new privileges", nil
}

// composeFunc runs podman-compose on the kit with the override.
type composeFunc func(args ...string) (string, error)

// composeKit makes sure of the images and podman-compose, and returns how
// to run the kit, its images replaced by ones made here.
func (e *env) composeKit() (composeFunc, error) {
	if err := e.ensureBaseImages(); err != nil {
		return nil, err
	}
	if _, err := e.podman("image", "exists", observerImage); err != nil {
		if _, err := e.buildObserverImage(); err != nil {
			return nil, err
		}
	}
	pc, err := e.ensurePodmanCompose()
	if err != nil {
		return nil, err
	}
	// The images the kit names that no registry here serves are replaced
	// by ones made from Debian's packages; nothing else is changed.
	override := filepath.Join(e.work, "compose.override.yaml")
	if err := os.WriteFile(override, []byte(fmt.Sprintf(`services:
  observer:
    image: %s
  prometheus:
    image: %s
  alertmanager:
    image: %s
`, observerImage, prometheusImage, alertmanagerImage)), 0o644); err != nil {
		return nil, err
	}
	password := make([]byte, 16)
	_, _ = rand.Read(password)
	composeEnv := append(e.podmanEnv(), "GRAFANA_ADMIN_PASSWORD="+hex.EncodeToString(password))
	return func(args ...string) (string, error) {
		base := []string{"--podman-args", strings.Join(e.podmanArgs(), " "),
			"-f", filepath.Join(e.repo, "deploy", "compose", "compose.yaml"), "-f", override}
		return e.runEnv(composeEnv, pc, append(base, args...)...)
	}, nil
}

// composePrometheus waits for the kit's Prometheus to scrape the observer
// and to load every shipped rule.
func (e *env) composePrometheus(compose composeFunc) (string, error) {
	// The target, scraped and up.
	if _, err := e.poll("Prometheus's thrashscope target up", 60*time.Second, func() error {
		var r struct {
			Data struct {
				ActiveTargets []struct {
					Labels map[string]string `json:"labels"`
					Health string            `json:"health"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := getJSON("http://127.0.0.1:9090/api/v1/targets", &r); err != nil {
			return err
		}
		for _, t := range r.Data.ActiveTargets {
			if t.Labels["job"] == "thrashscope" && t.Health == "up" {
				return nil
			}
		}
		return fmt.Errorf("targets: %+v", r.Data.ActiveTargets)
	}); err != nil {
		logs, _ := compose("logs", "--tail", "20", "prometheus")
		return "", fmt.Errorf("%w\nprometheus log:\n%s", err, logs)
	}
	// The rules, every one of the shipped file's.
	want, err := shippedRules(e.repo)
	if err != nil {
		return "", err
	}
	var loaded int
	if _, err := e.poll("Prometheus's rules loaded", 30*time.Second, func() error {
		var r struct {
			Data struct {
				Groups []struct {
					Rules []json.RawMessage `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		if err := getJSON("http://127.0.0.1:9090/api/v1/rules", &r); err != nil {
			return err
		}
		loaded = 0
		for _, g := range r.Data.Groups {
			loaded += len(g.Rules)
		}
		if loaded != want {
			return fmt.Errorf("%d rules loaded, deploy/prometheus/rules/thrashscope.yml has %d", loaded, want)
		}
		return nil
	}); err != nil {
		return "", err
	}
	return fmt.Sprintf("target up, %d rules loaded", loaded), nil
}

// composeAlert induces a run and waits for its alert in Alertmanager.
func (e *env) composeAlert(compose composeFunc) (string, error) {
	// Alertmanager ready before the run: the alert must have somewhere to go.
	if _, err := e.poll("Alertmanager ready", 30*time.Second, func() error {
		_, err := get("http://127.0.0.1:9093/-/ready")
		return err
	}); err != nil {
		return "", err
	}
	// A quiet host first: the alert must not be there already.
	if n, err := alertsIn("http://127.0.0.1:9093/api/v2/alerts?filter=alertname%3D%22ThrashscopeHostThrashing%22"); err != nil || n > 0 {
		return "", fmt.Errorf("ThrashscopeHostThrashing in Alertmanager before any run (%d, %v): another thrash on this host?", n, err)
	}
	onset, runID, err := startRun("http://127.0.0.1:9752", composeSpec)
	if err != nil {
		return "", err
	}
	e.defer_(func() error { return abortRun("http://127.0.0.1:9752", runID) })
	var firing time.Duration
	_, err = e.poll("ThrashscopeHostThrashing in Alertmanager", 4*time.Minute, func() error {
		if firing == 0 {
			if n, err := firingInPrometheus("ThrashscopeHostThrashing"); err == nil && n > 0 {
				firing = time.Since(onset)
			}
		}
		n, err := alertsIn("http://127.0.0.1:9093/api/v2/alerts?filter=alertname%3D%22ThrashscopeHostThrashing%22")
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("not there yet")
		}
		return nil
	})
	if err != nil {
		logs, _ := compose("logs", "--tail", "30", "observer")
		return "", fmt.Errorf("%w\nobserver log:\n%s", err, logs)
	}
	return fmt.Sprintf("run %s: ThrashscopeHostThrashing firing in Prometheus %s and in Alertmanager %s after the onset",
		runID, firing.Round(100*time.Millisecond), time.Since(onset).Round(100*time.Millisecond)), nil
}

func getJSON(u string, v any) error {
	body, err := get(u)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(body), v)
}

// alertsIn counts the alerts an Alertmanager v2 alerts URL lists.
func alertsIn(u string) (int, error) {
	var alerts []json.RawMessage
	if err := getJSON(u, &alerts); err != nil {
		return 0, err
	}
	return len(alerts), nil
}

// firingInPrometheus counts the firing alerts of that name.
func firingInPrometheus(name string) (int, error) {
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := getJSON("http://127.0.0.1:9090/api/v1/alerts", &r); err != nil {
		return 0, err
	}
	n := 0
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == name && a.State == "firing" {
			n++
		}
	}
	return n, nil
}

// startRun starts a run and returns its onset (when the planned demand
// first exceeds the limit) and id.
func startRun(base, spec string) (time.Time, string, error) {
	resp, err := http.Post(base+"/api/v1/runs", "application/json", strings.NewReader(spec))
	if err != nil {
		return time.Time{}, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated {
		return time.Time{}, "", fmt.Errorf("POST /api/v1/runs %s: %s %s", spec, resp.Status, body)
	}
	var rec run.Record
	if err := json.Unmarshal(body, &rec); err != nil {
		return time.Time{}, "", err
	}
	off, ok := rec.Spec.Onset()
	if !ok {
		return time.Time{}, rec.ID, fmt.Errorf("the run %s never overcommits its limit: nothing to detect", spec)
	}
	return rec.StartedAt.Add(off), rec.ID, nil
}

// abortRun ends a run if it is still going.
func abortRun(base, id string) error {
	req, _ := http.NewRequest(http.MethodDelete, base+"/api/v1/runs/"+url.PathEscape(id), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil // the observer is gone already, and its run with it
	}
	resp.Body.Close()
	return nil
}

// shippedRules counts the rules of deploy/prometheus/rules/thrashscope.yml.
func shippedRules(repo string) (int, error) {
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "prometheus", "rules", "thrashscope.yml"))
	if err != nil {
		return 0, err
	}
	var f struct {
		Groups []struct {
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return 0, err
	}
	n := 0
	for _, g := range f.Groups {
		n += len(g.Rules)
	}
	return n, nil
}
