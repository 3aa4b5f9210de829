package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// packages are what the kits need from Debian, by the command that tells
// they are there.
var packages = map[string]string{
	"podman":     "podman",
	"runc":       "runc",
	"containerd": "containerd",
	"ctr":        "containerd",
	"mmdebstrap": "mmdebstrap",
	"newuidmap":  "uidmap",
	"gcc":        "gcc",
	"ip":         "iproute2",
}

// cniPlugins is where Debian's containernetworking-plugins puts the
// plugins containerd's pod network uses.
const cniPlugins = "/usr/lib/cni"

// env is what the kits share: the repository, the cache, a work directory
// removed at the end, and the things to undo.
type env struct {
	ctx   context.Context
	repo  string
	cache string
	work  string
	undo  []func() error
	start time.Time
	lock  *os.File // flock'd on --cache while this process runs
}

func newEnv(ctx context.Context, repo, cache string) (*env, error) {
	e := &env{ctx: ctx, repo: repo, cache: cache, start: time.Now()}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	// One deploytest at a time: each clears the fixed work directory below
	// and the engines' state in it. Held until the process exits.
	lock, err := os.OpenFile(filepath.Join(cache, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("another deploytest holds %s (a --prepare .ci/run started, say): wait for it to end: %w", lock.Name(), err)
	}
	e.lock = lock
	if err := e.install(); err != nil {
		return nil, err
	}
	// One fixed place: podman's store remembers its run directories, and a
	// run killed before its end leaves its state here, cleared now.
	work := "/run/thrashscope-deploy"
	if _, err := os.Stat(work); err == nil {
		e.logf("clearing %s, left by a run that did not finish", work)
		if err := unmountUnder(work); err != nil {
			return nil, err
		}
		if err := os.RemoveAll(work); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, err
	}
	e.work = work
	// Podman's settings for this machine, for these runs only: runc (crun
	// refuses a hybrid host), cgroupfs (systemd is not PID 1), and default
	// limits no higher than this process's (root here lacks
	// CAP_SYS_RESOURCE, so runc could not raise them).
	conf := fmt.Sprintf(`[containers]
default_ulimits = ["nofile=%d:%d", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
`, 4096, 4096)
	if err := os.WriteFile(filepath.Join(work, "containers.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return e, nil
}

// install gets the Debian packages the kits need when a command is
// missing.
func (e *env) install() error {
	var missing []string
	for cmd, pkg := range packages {
		if _, err := exec.LookPath(cmd); err != nil && !strings.Contains(strings.Join(missing, " "), pkg) {
			missing = append(missing, pkg)
		}
	}
	if _, err := os.Stat(filepath.Join(cniPlugins, "bridge")); err != nil {
		missing = append(missing, "containernetworking-plugins")
	}
	if len(missing) == 0 {
		return nil
	}
	e.logf("installing %s from Debian's packages", strings.Join(missing, ", "))
	args := append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)
	cmd := exec.CommandContext(e.ctx, "apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s: %w\n%s", strings.Join(missing, " "), err, tail(out))
	}
	return nil
}

// defer_ adds something to undo, last first.
func (e *env) defer_(f func() error) { e.undo = append(e.undo, f) }

// cleanup undoes what the last kit did, last first, and returns the
// first error.
func (e *env) cleanup() error {
	var errs []error
	for i := len(e.undo) - 1; i >= 0; i-- {
		if err := e.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	e.undo = nil
	return errors.Join(errs...)
}

// close cleans up and removes the work directory; true if that failed.
func (e *env) close() bool {
	err := e.cleanup()
	if rerr := os.RemoveAll(e.work); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		e.logf("cleaning up: %v", err)
		return true
	}
	return false
}

func (e *env) logf(format string, args ...any) {
	fmt.Printf("[%6.1fs] %s\n", time.Since(e.start).Seconds(), fmt.Sprintf(format, args...))
}

// run runs a command and returns its combined output.
func (e *env) run(name string, args ...string) (string, error) {
	return e.runEnv(nil, name, args...)
}

func (e *env) runEnv(extra []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(e.ctx, name, args...)
	cmd.Env = append(os.Environ(), extra...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(out.Bytes()))
	}
	return out.String(), nil
}

// tail is the end of a command's output, for an error.
func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 3000 {
		s = "…" + s[len(s)-3000:]
	}
	return s
}

// podmanArgs are the global flags of every podman call: images in the
// cache; run state, temporary files and network configs in the work
// directory, so nothing is left in /run or /etc.
func (e *env) podmanArgs() []string {
	return []string{"--root", filepath.Join(e.cache, "podman"), "--runroot", filepath.Join(e.work, "podman-run"),
		"--tmpdir", filepath.Join(e.work, "podman-tmp"), "--network-config-dir", filepath.Join(e.work, "podman-networks")}
}

func (e *env) podmanEnv() []string {
	return []string{"CONTAINERS_CONF=" + filepath.Join(e.work, "containers.conf")}
}

// podman runs podman with the global flags.
func (e *env) podman(args ...string) (string, error) {
	return e.runEnv(e.podmanEnv(), "podman", append(e.podmanArgs(), args...)...)
}

// poll calls check until it succeeds or the deadline passes, and returns
// how long it took.
func (e *env) poll(what string, deadline time.Duration, check func() error) (time.Duration, error) {
	start := time.Now()
	var last error
	for {
		if last = check(); last == nil {
			return time.Since(start), nil
		}
		if time.Since(start) > deadline {
			return time.Since(start), fmt.Errorf("%s: not within %s: %w", what, deadline, last)
		}
		select {
		case <-e.ctx.Done():
			return time.Since(start), e.ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// get fetches a URL: its body, or an error for a status other than 200.
func get(url string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s: %s", url, resp.Status, tail(b))
	}
	return string(b), nil
}

// freePort is a TCP port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portsFree fails naming the first of ports something listens on.
func portsFree(ports ...int) error {
	for _, p := range ports {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return fmt.Errorf("port %d is taken (%v): the compose kit binds it; stop what listens there", p, err)
		}
		l.Close()
	}
	return nil
}

// podmanLeftovers lists the containers, pods and volumes left in the
// kits' podman store.
func (e *env) podmanLeftovers() []string {
	var out []string
	for _, what := range []string{"container", "pod", "volume"} {
		args := []string{what, "ls", "--quiet"}
		if what == "container" {
			args = []string{"ps", "--all", "--quiet"}
		}
		list, err := e.podman(args...)
		if err != nil {
			continue // no store yet
		}
		for _, id := range strings.Fields(list) {
			out = append(out, "podman "+what+" "+id)
		}
	}
	return out
}
