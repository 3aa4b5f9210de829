package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
)

// The kubelet is built from the Go module proxy's k8s.io/kubernetes: its
// go.mod points the k8s.io/* staging modules at ./staging, which a module
// download does not have, so a small module of our own requires it and
// points them at the same versions published on their own. 1.34's
// kubelet starts on cgroup v1 (the memory controller is on v1 here) by
// default (failCgroupV1 false); the config says so anyway.
const (
	kubernetesVersion = "v1.34.4"
	stagingVersion    = "v0.34.4"
	pauseVersion      = "3.10.1" // build/pause/Makefile's TAG at that version
)

var (
	pauseImage = "localhost/thrashscope-deploy/pause:" + pauseVersion
	// The bridge and subnet of the pod network: private, and named so
	// nothing else on the host has them.
	podBridge = "tsdeploy0"
	podSubnet = "10.244.77.0/24"
)

// ensureKubelet builds the kubelet once into the cache.
func (e *env) ensureKubelet() (string, error) {
	bin := filepath.Join(e.cache, "kubelet", "kubelet-"+kubernetesVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	start := time.Now()
	mod := filepath.Join(e.work, "kubelet-build")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		return "", err
	}
	goEnv := []string{"GOFLAGS=-mod=mod", "CGO_ENABLED=0", "GOTOOLCHAIN=local"}
	if _, err := e.runEnv(goEnv, "go", "mod", "download", "-json", "k8s.io/kubernetes@"+kubernetesVersion); err != nil {
		return "", err
	}
	gomod, err := e.kubeletGoMod()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644); err != nil {
		return "", err
	}
	tools := "//go:build tools\n\npackage tools\n\nimport _ \"k8s.io/kubernetes/cmd/kubelet\"\n"
	if err := os.WriteFile(filepath.Join(mod, "tools.go"), []byte(tools), 0o644); err != nil {
		return "", err
	}
	tidy := exec.CommandContext(e.ctx, "go", "mod", "tidy")
	tidy.Dir, tidy.Env = mod, append(os.Environ(), goEnv...)
	if out, err := tidy.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go mod tidy for the kubelet: %w\n%s", err, tail(out))
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	// The version the kubelet reports, as the release build stamps it.
	ldflags := "-X k8s.io/component-base/version.gitVersion=" + kubernetesVersion
	build := exec.CommandContext(e.ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", bin+".tmp", "k8s.io/kubernetes/cmd/kubelet")
	build.Dir, build.Env = mod, append(os.Environ(), goEnv...)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the kubelet: %w\n%s", err, tail(out))
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		return "", err
	}
	e.logf("built the kubelet %s from the module proxy in %s", kubernetesVersion, time.Since(start).Round(time.Second))
	return bin, nil
}

// kubeletGoMod is the go.mod of a module that builds the kubelet: the
// kubernetes module's staging replaces, each pointed at its published
// version.
func (e *env) kubeletGoMod() (string, error) {
	modcache, err := e.run("go", "env", "GOMODCACHE")
	if err != nil {
		return "", err
	}
	upstream, err := os.ReadFile(filepath.Join(strings.TrimSpace(modcache), "cache", "download", "k8s.io", "kubernetes", "@v", kubernetesVersion+".mod"))
	if err != nil {
		return "", err
	}
	var gomod strings.Builder
	fmt.Fprintf(&gomod, "module thrashscope.local/kubelet\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n", kubernetesVersion)
	staging := regexp.MustCompile(`(?m)^\s+(k8s\.io/[\w.-]+) => \./staging/`)
	n := 0
	for _, m := range staging.FindAllStringSubmatch(string(upstream), -1) {
		fmt.Fprintf(&gomod, "\t%s => %s %s\n", m[1], m[1], stagingVersion)
		n++
	}
	gomod.WriteString(")\n")
	if n == 0 {
		return "", fmt.Errorf("k8s.io/kubernetes %s's go.mod has no staging replaces: the build recipe no longer fits", kubernetesVersion)
	}
	return gomod.String(), nil
}

// ensurePause builds the pause image from the kubelet's own pause.c into
// podman's store.
func (e *env) ensurePause() error {
	if _, err := e.podman("image", "exists", pauseImage); err == nil {
		return nil
	}
	// From the module cache, fetched into it where the kubelet was built
	// with a cache of its own (--prepare-kubelet's, in memory, gone).
	out, err := e.runEnv([]string{"GOFLAGS=-mod=mod", "GOTOOLCHAIN=local"}, "go", "mod", "download", "-json", "k8s.io/kubernetes@"+kubernetesVersion)
	if err != nil {
		return err
	}
	var mod struct{ Dir string }
	if i := strings.IndexByte(out, '{'); i < 0 || json.NewDecoder(strings.NewReader(out[i:])).Decode(&mod) != nil || mod.Dir == "" {
		return fmt.Errorf("go mod download -json k8s.io/kubernetes@%s named no directory: %s", kubernetesVersion, out)
	}
	src := filepath.Join(mod.Dir, "build", "pause", "linux", "pause.c")
	ctx := filepath.Join(e.work, "pause")
	if err := os.MkdirAll(ctx, 0o755); err != nil {
		return err
	}
	if _, err := e.run("gcc", "-Os", "-Wall", "-Werror", "-static", `-DVERSION=v`+pauseVersion, "-o", filepath.Join(ctx, "pause"), src); err != nil {
		return fmt.Errorf("compiling the kubelet's pause.c: %w", err)
	}
	containerfile := "FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT [\"/pause\"]\n"
	if err := os.WriteFile(filepath.Join(ctx, "Containerfile"), []byte(containerfile), 0o644); err != nil {
		return err
	}
	_, err = e.podman("build", "--pull=never", "-t", pauseImage, ctx)
	return err
}

// proveKubelet runs the DaemonSet's pod template as a static pod under a
// kubelet and containerd: Ready, with the capability set and seccomp
// profile it asks for, every probe up, and a scrape at the port the
// Service names.
func (e *env) proveKubelet() ([]string, error) {
	kubelet, err := e.kubeletParts()
	if err != nil {
		return nil, err
	}
	pod, service, err := podFromDaemonSet(e.repo)
	if err != nil {
		return nil, err
	}
	k := &kubeletRun{dir: filepath.Join(e.work, "k8s")}
	for _, d := range []string{"containerd", "manifests", "cni/net.d", "kubelet", "logs", "token"} {
		if err := os.MkdirAll(filepath.Join(k.dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	k.sock = filepath.Join(k.dir, "containerd", "containerd.sock")
	k.linksBefore, k.netnsBefore = linkNames(), entries("/run/netns")
	if err := e.startContainerd(k); err != nil {
		return nil, err
	}
	token := filepath.Join(k.dir, "token", "token")
	if err := os.WriteFile(token, []byte(randomHex(32)+"\n"), 0o400); err != nil {
		return nil, err
	}
	manifest, err := pod.manifest(filepath.Dir(token))
	if err != nil {
		return nil, err
	}
	if err := e.startKubelet(k, kubelet); err != nil {
		return nil, err
	}
	st, placed, tookReady, err := e.placePod(k, pod, manifest)
	if err != nil {
		return nil, err
	}
	figures := []string{fmt.Sprintf("Ready %s after the manifest was placed", tookReady.Round(100*time.Millisecond))}
	return e.checkPod(figures, pod, service, st, placed)
}

// kubeletRun is where a kubelet and its containerd run: their directory
// and socket, and what the host had before them.
type kubeletRun struct {
	dir, sock   string
	linksBefore map[string]bool
	netnsBefore map[string]bool
}

// ctr runs containerd's own client on the CRI's namespace.
func (e *env) ctr(k *kubeletRun, args ...string) (string, error) {
	return e.run("ctr", append([]string{"--address", k.sock, "--namespace", "k8s.io"}, args...)...)
}

// kubeletParts makes sure of what a kubelet run needs: the base images,
// the observer's image, the kubelet binary (returned) and the pause image.
func (e *env) kubeletParts() (string, error) {
	if err := e.ensureBaseImages(); err != nil {
		return "", err
	}
	if _, err := e.podman("image", "exists", observerImage); err != nil {
		if _, err := e.buildObserverImage(); err != nil {
			return "", err
		}
	}
	kubelet, err := e.ensureKubelet()
	if err != nil {
		return "", err
	}
	return kubelet, e.ensurePause()
}

// startContainerd writes containerd's and CNI's configuration, starts
// containerd with the images the pod needs, and defers its cleanup.
func (e *env) startContainerd(k *kubeletRun) error {
	dir, sock := k.dir, k.sock
	// containerd, with its image store and state in the work directory.
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Root here lacks CAP_SYS_RESOURCE, so it cannot lower a score.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"), sock, pauseImage,
		cniPlugins, filepath.Join(dir, "cni", "net.d"))
	if err := os.WriteFile(filepath.Join(dir, "containerd.toml"), []byte(conf), 0o644); err != nil {
		return err
	}
	cni := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "thrashscope-deploy", "plugins": [{"type": "bridge", "bridge": %q,
  "isGateway": true, "ipMasq": false, "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}}]}`,
		podBridge, podSubnet, filepath.Join(dir, "cni", "ipam"))
	if err := os.WriteFile(filepath.Join(dir, "cni", "net.d", "10-thrashscope-deploy.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	return e.runContainerd(k)
}

// runContainerd starts containerd, imports the images, and defers what
// removes everything it and the pods made.
func (e *env) runContainerd(k *kubeletRun) error {
	dir := k.dir
	// What the kubelet, containerd and the containers make outside the
	// work directory, removed once they are gone: cgroups (kubepods/…),
	// the shims' sockets and runc's state (/run/containerd), CNI's result
	// cache, log links, the kubelet's device-plugin socket.
	cgroupsBefore, filesBefore := cgroupDirs(), newFiles(nil, outsideDirs...)
	e.defer_(func() error {
		return errors.Join(removeNewCgroups(cgroupsBefore), removeNewFiles(filesBefore, outsideDirs...))
	})
	containerd, err := e.daemon("containerd", filepath.Join(dir, "containerd.log"), "containerd", "--config", filepath.Join(dir, "containerd.toml"))
	if err != nil {
		return err
	}
	e.defer_(func() error {
		// The network the pods left, and their mounts under the work
		// directory, once containerd is gone.
		var errs []error
		// A pod network the kubelet did not tear down (it was stopped
		// first): deleting the namespace takes its veth pair with it.
		for _, ns := range newEntries(k.netnsBefore, "/run/netns") {
			e.logf("removing the pod network namespace %s, left by the CRI", ns)
			if _, err := e.run("ip", "netns", "delete", ns); err != nil {
				errs = append(errs, err)
			}
		}
		if !k.linksBefore[podBridge] {
			if _, err := os.Stat("/sys/class/net/" + podBridge); err == nil {
				if _, err := e.run("ip", "link", "delete", podBridge); err != nil {
					errs = append(errs, err)
				}
			}
		}
		errs = append(errs, unmountUnder(e.work))
		return errors.Join(errs...)
	})
	e.defer_(containerd)
	ctr := func(args ...string) (string, error) { return e.ctr(k, args...) }
	if _, err := e.poll("containerd up", 30*time.Second, func() error { _, err := ctr("version"); return err }); err != nil {
		return err
	}
	// The images, from podman's store: the pod's own and the pause image.
	for _, img := range []string{observerImage, pauseImage} {
		tar := filepath.Join(dir, "image.tar")
		if _, err := e.podman("save", "--quiet", "--format", "docker-archive", "-o", tar, img); err != nil {
			return err
		}
		if _, err := ctr("images", "import", tar); err != nil {
			return err
		}
		os.Remove(tar)
	}
	e.defer_(func() error { return removeCRIContainers(ctr) })
	return nil
}

// startKubelet starts the kubelet, standalone, and waits until it is
// healthy.
func (e *env) startKubelet(k *kubeletRun, kubelet string) error {
	dir, sock := k.dir, k.sock
	// No API server, the pod from its manifest directory, read-only
	// status on loopback.
	kcfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 10255
healthzBindAddress: 127.0.0.1
healthzPort: 10248
staticPodPath: %q
podLogsDir: %q
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
resolvConf: /etc/resolv.conf
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
`, filepath.Join(dir, "manifests"), filepath.Join(dir, "logs"), sock)
	if err := os.WriteFile(filepath.Join(dir, "kubelet.yaml"), []byte(kcfg), 0o644); err != nil {
		return err
	}
	if err := portsFree(10248, 10250, 10255); err != nil {
		return err
	}
	stopKubelet, err := e.daemon("kubelet", filepath.Join(dir, "kubelet.log"), kubelet, "--config", filepath.Join(dir, "kubelet.yaml"),
		"--root-dir", filepath.Join(dir, "kubelet"), "--cert-dir", filepath.Join(dir, "kubelet", "pki"), "--hostname-override", "thrashscope-deploy", "--v", "1")
	if err != nil {
		return err
	}
	e.defer_(stopKubelet)
	if _, err := e.poll("the kubelet healthy", 60*time.Second, func() error { _, err := get("http://127.0.0.1:10248/healthz"); return err }); err != nil {
		return fmt.Errorf("%w\nkubelet log:\n%s", err, fileTail(filepath.Join(dir, "kubelet.log")))
	}
	return nil
}

// placePod places the pod's manifest, defers its removal, and waits until
// the pod is Ready: its status, when it was placed, and how long it took.
func (e *env) placePod(k *kubeletRun, pod staticPod, manifest []byte) (podStatus, time.Time, time.Duration, error) {
	dir := k.dir
	ctr := func(args ...string) (string, error) { return e.ctr(k, args...) }
	// The pod, then its removal before the kubelet stops.
	mpath := filepath.Join(dir, "manifests", "thrashscope.yaml")
	placed := time.Now()
	if err := os.WriteFile(mpath, manifest, 0o644); err != nil {
		return podStatus{}, time.Time{}, 0, err
	}
	e.defer_(func() error {
		os.Remove(mpath)
		// The kubelet drops the pod from its list at once, then kills it:
		// its containers, then the sandbox, whose network it tears down.
		// Wait for all of that before the kubelet stops.
		_, err := e.poll("the static pod's containers and network gone", 90*time.Second, func() error {
			if tasks, err := ctr("tasks", "list", "--quiet"); err == nil && strings.TrimSpace(tasks) != "" {
				return fmt.Errorf("tasks still there: %s", strings.Join(strings.Fields(tasks), " "))
			}
			if ns := newEntries(k.netnsBefore, "/run/netns"); len(ns) > 0 {
				return fmt.Errorf("pod network namespaces still there: %v", ns)
			}
			return nil
		})
		return err
	})
	var st podStatus
	tookReady, err := e.poll("the observer pod Ready", 3*time.Minute, func() error {
		ps, err := kubeletPods()
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.Metadata.Namespace == pod.namespace && strings.HasPrefix(p.Metadata.Name, pod.name) {
				st = p.Status
				if st.ready() {
					return nil
				}
				return fmt.Errorf("pod %s: phase %s, conditions %+v, containers %+v", p.Metadata.Name, st.Phase, st.Conditions, st.ContainerStatuses)
			}
		}
		return fmt.Errorf("no pod %s/%s among %d", pod.namespace, pod.name, len(ps))
	})
	if err != nil {
		return podStatus{}, time.Time{}, 0, fmt.Errorf("%w\nkubelet log:\n%s", err, fileTail(filepath.Join(dir, "kubelet.log")))
	}
	return st, placed, tookReady, nil
}

// checkPod holds the Ready pod to its manifest: its security context as
// the kernel sees it, a scrape at the Service's port, and liveness.
func (e *env) checkPod(figures []string, pod staticPod, service serviceInfo, st podStatus, placed time.Time) ([]string, error) {
	// Its security context, as the kernel sees the observer process.
	pid, err := observerPID(pod.containerID(st))
	if err != nil {
		return figures, err
	}
	caps, seccomp, nnp, err := securityOf(pid)
	if err != nil {
		return figures, err
	}
	want := uint64(1)<<capBPF | 1<<capPerfmon | 1<<capDACOverride
	if caps != want || seccomp != 2 || nnp != 1 {
		return figures, fmt.Errorf("the observer (pid %d) runs with CapEff %#x, Seccomp %d, NoNewPrivs %d; the manifest asks for %#x (BPF, PERFMON, DAC_OVERRIDE), 2 (RuntimeDefault), 1",
			pid, caps, seccomp, nnp, want)
	}
	figures = append(figures, "CapEff exactly BPF, PERFMON, DAC_OVERRIDE; seccomp RuntimeDefault (mode 2); no new privileges")

	// A scrape at the port the Service names, on the pod's address.
	port, err := pod.containerPort(service.targetPort)
	if err != nil {
		return figures, err
	}
	var scrape string
	if _, err := e.poll("every probe up in the pod's /metrics", 60*time.Second, func() error {
		var err error
		if scrape, err = get(fmt.Sprintf("http://%s:%d/metrics", st.PodIP, port)); err != nil {
			return err
		}
		return probesUp(scrape)
	}); err != nil {
		return figures, err
	}
	figures = append(figures, fmt.Sprintf("5 probes up; %d KB of metrics from %s:%d (the Service's %s)", len(scrape)/1000, st.PodIP, port, service.targetPort))
	// Liveness holds: no restart after three of its periods.
	alive := time.Since(placed)
	if wait := 3*pod.livenessPeriod - alive; wait > 0 {
		time.Sleep(wait)
	}
	ps, err := kubeletPods()
	if err != nil {
		return figures, err
	}
	for _, p := range ps {
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount > 0 || !c.Ready {
				return figures, fmt.Errorf("container %s: %d restarts, ready %v: the liveness or readiness probe failed", c.Name, c.RestartCount, c.Ready)
			}
		}
	}
	figures = append(figures, fmt.Sprintf("liveness and readiness passing, no restart after %s", time.Since(placed).Round(time.Second)))
	return figures, nil
}

// daemon starts a long-running command with its output in a log file, and
// returns how to stop it (SIGTERM, then SIGKILL after 30 s).
func (e *env) daemon(what, log string, name string, args ...string) (func() error, error) {
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); f.Close() }()
	return func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
			return nil
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return fmt.Errorf("%s did not stop within 30 s of SIGTERM: killed", what)
		}
	}, nil
}

// removeCRIContainers stops and removes whatever containers the CRI left
// (a sandbox the kubelet had not collected yet).
func removeCRIContainers(ctr func(...string) (string, error)) error {
	out, err := ctr("containers", "list", "--quiet")
	if err != nil {
		return nil // containerd is gone: nothing to ask
	}
	var errs []error
	for _, id := range strings.Fields(out) {
		_, _ = ctr("tasks", "kill", "--signal", "SIGKILL", id)
		time.Sleep(200 * time.Millisecond)
		_, _ = ctr("tasks", "delete", "--force", id)
		if _, err := ctr("containers", "delete", id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unmountUnder lazily unmounts everything mounted below dir, deepest
// first.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// entries lists a directory's names.
func entries(dir string) map[string]bool {
	out := map[string]bool{}
	list, _ := os.ReadDir(dir)
	for _, d := range list {
		out[d.Name()] = true
	}
	return out
}

// newEntries are the names in dir that before did not have.
func newEntries(before map[string]bool, dir string) []string {
	var out []string
	for n := range entries(dir) {
		if !before[n] {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func linkNames() map[string]bool {
	out := map[string]bool{}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		out[l.Name()] = true
	}
	return out
}

func fileTail(path string) string {
	b, _ := os.ReadFile(path)
	return tail(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	f, _ := os.Open("/dev/urandom")
	defer f.Close()
	_, _ = f.Read(b)
	return fmt.Sprintf("%x", b)
}

// podStatus is the part of a pod's status the test reads.
type podStatus struct {
	Phase      string `json:"phase"`
	PodIP      string `json:"podIP"`
	Conditions []struct {
		Type   string `json:"type"`
		Status string `json:"status"`
	} `json:"conditions"`
	ContainerStatuses []struct {
		Name         string `json:"name"`
		Ready        bool   `json:"ready"`
		RestartCount int    `json:"restartCount"`
		ContainerID  string `json:"containerID"`
	} `json:"containerStatuses"`
}

func (s podStatus) ready() bool {
	for _, c := range s.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True" && s.PodIP != ""
		}
	}
	return false
}

type kubeletPod struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Status podStatus `json:"status"`
}

// kubeletPods lists the kubelet's pods from its read-only port.
func kubeletPods() ([]kubeletPod, error) {
	var list struct {
		Items []kubeletPod `json:"items"`
	}
	if err := getJSON("http://127.0.0.1:10255/pods", &list); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Capability numbers (linux/capability.h).
const (
	capDACOverride = 1
	capPerfmon     = 38
	capBPF         = 39
)

// observerPID finds the observer process of the container: hostPID makes
// it a host process, in a cgroup named after the container's id.
func observerPID(containerID string) (int, error) {
	id := containerID[strings.Index(containerID, "://")+3:]
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if filepath.Base(exe) != "observer" {
			continue
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if bytes.Contains(cg, []byte(id)) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no observer process in a cgroup of container %s", id)
}

// securityOf reads a process's effective capabilities, seccomp mode and
// no-new-privileges flag.
func securityOf(pid int) (capEff uint64, seccomp, nnp int, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, _ := strings.Cut(s.Text(), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "CapEff":
			capEff, _ = strconv.ParseUint(v, 16, 64)
		case "Seccomp":
			seccomp, _ = strconv.Atoi(v)
		case "NoNewPrivs":
			nnp, _ = strconv.Atoi(v)
		}
	}
	return capEff, seccomp, nnp, s.Err()
}

// staticPod is the DaemonSet's pod template made a static pod.
type staticPod struct {
	name, namespace string
	template        map[string]any
	livenessPeriod  time.Duration
}

type serviceInfo struct{ targetPort string }

// podFromDaemonSet reads deploy/kubernetes/observer.yaml: the DaemonSet's
// pod template and the Service's target port.
func podFromDaemonSet(repo string) (staticPod, serviceInfo, error) {
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "kubernetes", "observer.yaml"))
	if err != nil {
		return staticPod{}, serviceInfo{}, err
	}
	var pod staticPod
	var svc serviceInfo
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			break
		}
		meta, _ := doc["metadata"].(map[string]any)
		spec, _ := doc["spec"].(map[string]any)
		switch doc["kind"] {
		case "DaemonSet":
			tmpl, _ := spec["template"].(map[string]any)
			pod = staticPod{name: fmt.Sprint(meta["name"]), namespace: fmt.Sprint(meta["namespace"]), template: tmpl, livenessPeriod: 10 * time.Second}
		case "Service":
			ports, _ := spec["ports"].([]any)
			if len(ports) == 1 {
				p, _ := ports[0].(map[string]any)
				svc.targetPort = fmt.Sprint(p["targetPort"])
			}
		}
	}
	if pod.template == nil || svc.targetPort == "" {
		return pod, svc, errors.New("deploy/kubernetes/observer.yaml: want a DaemonSet with a pod template and a Service with one port")
	}
	for _, c := range pod.containers() {
		if lp, ok := c["livenessProbe"].(map[string]any); ok {
			if s, ok := lp["periodSeconds"].(int); ok {
				pod.livenessPeriod = time.Duration(s) * time.Second
			}
		}
	}
	return pod, svc, nil
}

func (p staticPod) spec() map[string]any {
	s, _ := p.template["spec"].(map[string]any)
	return s
}

func (p staticPod) containers() []map[string]any {
	var out []map[string]any
	cs, _ := p.spec()["containers"].([]any)
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// containerPort resolves a Service target port (a name or a number) to
// the container's port.
func (p staticPod) containerPort(target string) (int, error) {
	if n, err := strconv.Atoi(target); err == nil {
		return n, nil
	}
	for _, c := range p.containers() {
		ports, _ := c["ports"].([]any)
		for _, port := range ports {
			m, _ := port.(map[string]any)
			if m["name"] == target {
				if n, ok := m["containerPort"].(int); ok {
					return n, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("the Service's targetPort %q names no container port", target)
}

// containerID is the observer container's id in a pod status.
func (p staticPod) containerID(st podStatus) string {
	for _, c := range st.ContainerStatuses {
		if c.ContainerID != "" {
			return c.ContainerID
		}
	}
	return "none://"
}

// manifest is the pod template as a static pod, changed only where a
// standalone kubelet needs it, each change said here:
//   - the image is the one just built (the manifest says to set it);
//   - a static pod can reference no Secret or ServiceAccount (there is no
//     API server to fetch them from): the token Secret's volume becomes a
//     host directory holding a token file of the same name.
func (p staticPod) manifest(tokenDir string) ([]byte, error) {
	spec := p.spec()
	delete(spec, "serviceAccountName")
	for _, c := range p.containers() {
		c["image"] = observerImage
	}
	vols, _ := spec["volumes"].([]any)
	for _, v := range vols {
		m, _ := v.(map[string]any)
		if _, ok := m["secret"]; ok {
			delete(m, "secret")
			m["hostPath"] = map[string]any{"path": tokenDir, "type": "Directory"}
		}
	}
	meta, _ := p.template["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["name"], meta["namespace"] = p.name, p.namespace
	return yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

// outsideDirs are where containerd 1.6, its shims, the CRI and the
// kubelet write outside the directories they are given.
var outsideDirs = []string{"/run/containerd", "/var/lib/cni", "/var/log/containers", "/var/lib/kubelet"}

// cgroupDirs lists every cgroup directory now.
func cgroupDirs() map[string]bool {
	out := map[string]bool{}
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			out[p] = true
		}
		return nil
	})
	return out
}

// removeNewCgroups removes the cgroups made since before, deepest first,
// retrying while their last tasks exit.
func removeNewCgroups(before map[string]bool) error {
	var dirs []string
	for d := range cgroupDirs() {
		if !before[d] {
			dirs = append(dirs, d)
		}
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, d := range dirs {
		var err error
		for try := 0; try < 50; try++ {
			if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// newFiles lists the files below dirs that were not in before (all of
// them when before is nil).
func newFiles(before map[string]bool, dirs ...string) map[string]bool {
	out := map[string]bool{}
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !before[p] {
				out[p] = true
			}
			return nil
		})
	}
	return out
}

// removeNewFiles removes what appeared below dirs since before, deepest
// first.
func removeNewFiles(before map[string]bool, dirs ...string) error {
	var paths []string
	for p := range newFiles(before, dirs...) {
		paths = append(paths, p)
	}
	slices.SortFunc(paths, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
