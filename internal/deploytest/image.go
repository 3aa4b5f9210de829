package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// Base images, made from Debian's packages with mmdebstrap and imported:
// the names the Dockerfile and the compose kit ask for are given only to
// what they stand for (Debian trixie; the Go toolchain of go.mod's
// version), and Prometheus and Alertmanager get names of their own.
const (
	debianImage       = "docker.io/library/debian:trixie-slim"
	golangImage       = "docker.io/library/golang:1.26-trixie"
	prometheusImage   = "localhost/thrashscope-deploy/prometheus:debian"
	alertmanagerImage = "localhost/thrashscope-deploy/alertmanager:debian"
	observerImage     = "localhost/thrashscope:dev"
	debianMirror      = "http://deb.debian.org/debian"
)

// imageRunFlags are how deploy/README.md runs the image under Podman or
// Docker; the test runs it exactly so, and fails if the README says
// otherwise.
var imageRunFlags = []string{"--privileged", "--pid=host", "--network=host",
	"-v", "/sys/fs/cgroup:/host/sys/fs/cgroup:ro", "-v", "thrashscope-data:/var/lib/thrashscope"}

// imageObserverFlags follow the image name.
var imageObserverFlags = []string{"--path.cgroupfs=/host/sys/fs/cgroup"}

// readmeCommand is the command deploy/README.md gives, one line.
func readmeCommand() string {
	return "podman run -d --name thrashscope " + strings.Join(imageRunFlags, " ") + " thrashscope:dev " +
		strings.Join(append([]string{"--web.listen-address=127.0.0.1:9752"}, imageObserverFlags...), " ")
}

// ensureBaseImages makes the base images that are not in the cache yet.
func (e *env) ensureBaseImages() error {
	if !strings.HasPrefix(runtime.Version(), "go1.26") {
		return fmt.Errorf("the golang:1.26 base image is this machine's Go toolchain, and it is %s: install Go 1.26", runtime.Version())
	}
	goroot := runtime.GOROOT()
	for _, b := range []baseImage{
		{names: []string{debianImage}, describe: "Debian trixie, minbase",
			changes: [][]string{{"CMD [\"bash\"]"}}},
		{names: []string{golangImage}, include: "ca-certificates,make,git",
			describe: "Debian trixie with make, git and this machine's Go toolchain (" + runtime.Version() + ")",
			hooks:    []string{`mkdir -p "$1/usr/local" "$1/go"`, "copy-in " + goroot + " /usr/local"},
			changes: [][]string{{"ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"ENV GOPATH=/go", "ENV GOTOOLCHAIN=local", "WORKDIR /go"}}},
		{names: []string{prometheusImage, alertmanagerImage}, include: "prometheus,prometheus-alertmanager",
			describe: "Debian trixie's prometheus and prometheus-alertmanager packages",
			changes: [][]string{{`ENTRYPOINT ["/usr/bin/prometheus"]`, "WORKDIR /prometheus"},
				{`ENTRYPOINT ["/usr/bin/prometheus-alertmanager"]`, "WORKDIR /alertmanager"}}},
	} {
		missing := false
		for _, n := range b.names {
			if _, err := e.podman("image", "exists", n); err != nil {
				missing = true
			}
		}
		if !missing {
			continue
		}
		if filepath.Base(goroot) != "go" {
			return fmt.Errorf("GOROOT %s: the golang image copies it to /usr/local/go, so its last element must be go", goroot)
		}
		if err := e.makeBaseImage(b); err != nil {
			return err
		}
	}
	return nil
}

// baseImage is a base image made from Debian's packages with mmdebstrap,
// imported under each name with its own changes.
type baseImage struct {
	names    []string
	include  string
	hooks    []string
	changes  [][]string // one per name
	describe string
}

// makeBaseImage makes b's root file system and imports it under each name.
func (e *env) makeBaseImage(b baseImage) error {
	start := time.Now()
	tar := filepath.Join(e.work, "rootfs.tar")
	args := []string{"--quiet", "--variant=minbase", "--format=tar"}
	if b.include != "" {
		args = append(args, "--include="+b.include)
	}
	for _, h := range b.hooks {
		args = append(args, "--customize-hook="+h)
	}
	args = append(args, "trixie", tar, debianMirror)
	if _, err := e.run("mmdebstrap", args...); err != nil {
		return fmt.Errorf("making %s: %w", b.describe, err)
	}
	for i, n := range b.names {
		imp := []string{"import", "--quiet"}
		for _, c := range b.changes[i] {
			imp = append(imp, "--change", c)
		}
		if _, err := e.podman(append(imp, tar, n)...); err != nil {
			return fmt.Errorf("importing %s: %w", n, err)
		}
	}
	os.Remove(tar)
	e.logf("made %s: %s, in %s", strings.Join(b.names, " and "), b.describe, time.Since(start).Round(time.Second))
	return nil
}

// buildObserverImage builds deploy/container/Dockerfile as it is, from
// the local base images only; go mod download inside it reaches the
// module proxy with this machine's CA bundle.
func (e *env) buildObserverImage() (time.Duration, error) {
	if err := e.ensureBaseImages(); err != nil {
		return 0, err
	}
	version, _ := e.run("git", "-C", e.repo, "describe", "--tags", "--always", "--dirty")
	ca := os.Getenv("SSL_CERT_FILE")
	if ca == "" {
		ca = "/etc/ssl/certs/ca-certificates.crt"
	}
	start := time.Now()
	_, err := e.podman("build", "--pull=never", "--network=host", "--layers",
		"--build-arg", "VERSION="+strings.TrimSpace(version),
		"-v", ca+":/etc/ssl/certs/ca-certificates.crt:ro",
		"-f", filepath.Join(e.repo, "deploy", "container", "Dockerfile"),
		"-t", observerImage, e.repo)
	if err != nil {
		return 0, fmt.Errorf("building deploy/container/Dockerfile: %w", err)
	}
	return time.Since(start), nil
}

// probeLine is a line of --check's table: name, status.
var probeLine = regexp.MustCompile(`(?m)^(\w+)\s+(up|down)\s+(true|false)\b`)

// proveImage builds the image and runs it as deploy/README.md says:
// --check passes with every probe up, and the observer serves /metrics
// with every probe up and stops cleanly on SIGTERM.
func (e *env) proveImage() ([]string, error) {
	readme, err := os.ReadFile(filepath.Join(e.repo, "deploy", "README.md"))
	if err != nil {
		return nil, err
	}
	if !strings.Contains(string(readme), readmeCommand()) {
		return nil, fmt.Errorf("deploy/README.md does not give the command this test runs: %s", readmeCommand())
	}
	took, err := e.buildObserverImage()
	if err != nil {
		return nil, err
	}
	figures := []string{fmt.Sprintf("image built in %s", took.Round(time.Second))}

	e.defer_(func() error {
		_, err := e.podman("volume", "rm", "--force", "thrashscope-data")
		return err
	})
	out, err := e.podman(append(append(append([]string{"run", "--rm"}, imageRunFlags...), observerImage), "--check")...)
	if err != nil {
		return figures, fmt.Errorf("--check in the container: %w", err)
	}
	up, total := 0, 0
	for _, m := range probeLine.FindAllStringSubmatch(out, -1) {
		total++
		if m[2] == "up" {
			up++
		}
	}
	if total != 5 || up != total {
		return figures, fmt.Errorf("--check in the container: %d of %d probes up, want 5 of 5:\n%s", up, total, out)
	}
	figures = append(figures, fmt.Sprintf("--check: %d of %d probes up", up, total))

	line, err := e.imageLeastPrivilege()
	if err != nil {
		return figures, err
	}
	figures = append(figures, line)
	lines, err := e.imageServes()
	return append(figures, lines...), err
}

// imageLeastPrivilege runs --check with the DaemonSet's least-privilege
// set under Podman's default seccomp profile, which admits bpf() and
// perf_event_open only with CAP_SYS_ADMIN: the probes are down, and the
// observer says seccomp is why, with the fix.
func (e *env) imageLeastPrivilege() (string, error) {
	least := []string{"run", "--rm", "--pid=host", "--network=host", "--cap-drop=all",
		"--cap-add=CAP_BPF,CAP_PERFMON,CAP_DAC_OVERRIDE", "--security-opt=no-new-privileges", observerImage, "--check"}
	out, err := e.podman(least...)
	if err == nil {
		return "", fmt.Errorf("--check under Podman's default seccomp profile with only CAP_BPF, CAP_PERFMON and CAP_DAC_OVERRIDE passed: the profile admits them here, and deploy/README.md says it does not:\n%s", out)
	}
	if !strings.Contains(out, "seccomp") || strings.Contains(out, "memlock") {
		return "", fmt.Errorf("--check under Podman's default seccomp profile with the least-privilege set failed without naming seccomp (or still naming memlock):\n%s", out)
	}
	return "least-privilege set under Podman's default seccomp profile: probes down, the error names seccomp and the fix", nil

}

// imageServes runs the image as the daemon: every probe up in its
// /metrics, and a clean exit on SIGTERM.
func (e *env) imageServes() ([]string, error) {
	var figures []string
	port, err := freePort()
	if err != nil {
		return figures, err
	}
	name := "thrashscope-deploy-image"
	args := append([]string{"run", "-d", "--name", name}, imageRunFlags...)
	args = append(append(args, observerImage, fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port)), imageObserverFlags...)
	if _, err := e.podman(args...); err != nil {
		return figures, err
	}
	e.defer_(func() error {
		_, err := e.podman("rm", "--force", "--time", "30", name)
		return err
	})
	var scrape string
	took, err := e.poll("the container's /metrics with every probe up", 60*time.Second, func() error {
		var err error
		if scrape, err = get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); err != nil {
			return err
		}
		return probesUp(scrape)
	})
	if err != nil {
		logs, _ := e.podman("logs", "--tail", "20", name)
		return figures, fmt.Errorf("%w\ncontainer log:\n%s", err, logs)
	}
	figures = append(figures, fmt.Sprintf("/metrics with 5 probes up %s after start (%d KB)", took.Round(100*time.Millisecond), len(scrape)/1000))
	// SIGTERM, as podman stop and a compose down send it: the observer
	// exits in time, not killed.
	stopStart := time.Now()
	if _, err := e.podman("stop", "--time", "30", name); err != nil {
		return figures, err
	}
	code, _ := e.podman("inspect", "--format", "{{.State.ExitCode}}", name)
	if strings.TrimSpace(code) != "0" {
		return figures, fmt.Errorf("the observer exited %s on SIGTERM, want 0", strings.TrimSpace(code))
	}
	figures = append(figures, fmt.Sprintf("stopped cleanly in %s", time.Since(stopStart).Round(100*time.Millisecond)))
	return figures, nil
}

// probeUp is a probe_up series.
var probeUp = regexp.MustCompile(`(?m)^thrashscope_probe_up\{[^}]*probe="(\w+)"[^}]*\} (\S+)$`)

// probesUp fails unless the scrape has five probe_up series, all 1.
func probesUp(scrape string) error {
	ms := probeUp.FindAllStringSubmatch(scrape, -1)
	var down []string
	for _, m := range ms {
		if m[2] != "1" {
			down = append(down, m[1])
		}
	}
	if len(ms) != 5 || len(down) > 0 {
		return fmt.Errorf("%d probe_up series, down: %v; want 5, all up", len(ms), down)
	}
	return nil
}
