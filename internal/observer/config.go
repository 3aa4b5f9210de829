package observer

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/indicators"
	"github.com/thrashscope/thrashscope/internal/probe"
	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// Probe modes, as in --probes.
const (
	ProbesAuto   = "auto"   // BPF when it loads, else procfs alone
	ProbesBPF    = "bpf"    // BPF or fail
	ProbesProcfs = "procfs" // never load BPF
)

// Config is the observer's validated configuration, filled from flags.
type Config struct {
	ListenAddresses []string
	WebConfigFile   string
	APITokenFile    string
	ProcfsPath      string
	SysfsPath       string
	// CgroupfsPath is the cgroup2 mount workloads are named in; empty
	// finds it in /proc/self/mountinfo.
	CgroupfsPath string
	Probes       string
	// ProbesWay is the BPF programs' way (probe.Way); "" or auto takes the
	// fast way where the kernel has what it needs.
	ProbesWay      probe.Way
	SampleInterval time.Duration
	TopK           int
	// CgroupTopK is how many workloads (cgroups) get series; 0 turns the
	// per-cgroup accounting off. CgroupDepth, when above 0, counts a
	// deeper cgroup in its ancestor at that depth.
	CgroupTopK, CgroupDepth int
	// KubeletRoots are the kubelet's --cgroup-root(s), under which alone
	// Kubernetes labels are read; none is "/" (workload.Trust).
	KubeletRoots []string
	DataDir      string
	CgroupParent string
	// LoadgenBinary is the consumer executable; empty finds loadgen beside
	// this executable, then on PATH.
	LoadgenBinary string
	// AllowHostSettings lets a run's spec change a host-wide memory
	// setting (--settings.allow-host), journalled and restored; only with
	// an API token, unless AllowHostWithoutToken (a lab host's choice,
	// --settings.allow-host-without-token).
	AllowHostSettings     bool
	AllowHostWithoutToken bool
	// SettingsStateDir is where the host's settings lock and journal are
	// (--settings.state-dir).
	SettingsStateDir string
	// WSSInterval is τ of the working-set estimate; 0 turns it off.
	WSSInterval time.Duration
	// WSSPeriod is how often each tracked process's window opens (a
	// multiple of WSSInterval); zero is every WSSInterval, back to back.
	WSSPeriod time.Duration
	Detector  indicators.DetectorConfig
	// Wake wakes the sampler before its tick when memory trouble begins:
	// the probes' first major fault or stall, or on procfs alone a PSI
	// trigger.
	Wake      bool
	FaultKind string
	// EnablePprof serves the Go runtime's profiles at /debug/pprof/.
	EnablePprof bool
	// ReleaseCode unmaps the binary's pages that ran once (package
	// codepages): at start, once started, and after each run.
	ReleaseCode bool
}

// Validate checks every field and says what to change.
func (c Config) Validate() error {
	var errs []error
	switch c.Probes {
	case ProbesAuto, ProbesBPF, ProbesProcfs:
	default:
		errs = append(errs, fmt.Errorf("--probes=%q: want auto, bpf or procfs", c.Probes))
	}
	if c.ProbesWay != "" {
		if _, err := probe.ParseWay(string(c.ProbesWay)); err != nil {
			errs = append(errs, err)
		}
	}
	if c.SampleInterval < 100*time.Millisecond || c.SampleInterval > time.Minute {
		errs = append(errs, fmt.Errorf("--sample.interval=%s: want between 100ms and 1m", c.SampleInterval))
	}
	if c.WSSInterval != 0 && (c.WSSInterval < 100*time.Millisecond || c.WSSInterval > time.Minute) {
		errs = append(errs, fmt.Errorf("--wss.interval=%s: want 0 (off) or between 100ms and 1m", c.WSSInterval))
	}
	if c.WSSInterval != 0 && c.WSSPeriod != 0 && (c.WSSPeriod < c.WSSInterval || c.WSSPeriod > time.Minute) {
		errs = append(errs, fmt.Errorf("--wss.period=%s: want between --wss.interval (%s) and 1m, or 0 for every interval", c.WSSPeriod, c.WSSInterval))
	}
	if err := c.Detector.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.FaultKind != indicators.CountAnon && c.FaultKind != indicators.CountAll {
		errs = append(errs, fmt.Errorf("--detector.fault-kind=%q: want anon (swap faults, as TPF) or all", c.FaultKind))
	}
	errs = append(errs, c.validateSeries()...)
	for _, p := range []struct{ flag, path string }{{"--path.procfs", c.ProcfsPath}, {"--path.sysfs", c.SysfsPath}} {
		if fi, err := os.Stat(p.path); err != nil || !fi.IsDir() {
			errs = append(errs, fmt.Errorf("%s=%q: not a directory", p.flag, p.path))
		}
	}
	errs = append(errs, c.validateListen()...)
	return errors.Join(errs...)
}

// validateSeries checks the flags that bound the processes' and the
// workloads' series.
func (c Config) validateSeries() []error {
	var errs []error
	if c.TopK < 1 || c.TopK > 1000 {
		errs = append(errs, fmt.Errorf("--process.top-k=%d: want 1 to 1000 (each process adds about ten series)", c.TopK))
	}
	if c.CgroupTopK < 0 || c.CgroupTopK > 1000 {
		errs = append(errs, fmt.Errorf("--cgroup.top-k=%d: want 0 (off) to 1000 (each workload adds about a dozen series)", c.CgroupTopK))
	}
	for _, r := range c.KubeletRoots {
		if !strings.HasPrefix(r, "/") || slices.Contains(strings.Split(r, "/"), "..") || len(r) > 4096 {
			errs = append(errs, fmt.Errorf("--cgroup.kubelet-root=%q: want the kubelet's --cgroup-root, a path from the cgroup2 root such as / or /kubelet.slice", strictjson.Clip(r)))
		}
	}
	if c.CgroupDepth < 0 || c.CgroupDepth > 32 {
		errs = append(errs, fmt.Errorf("--cgroup.depth=%d: want 0 (every level) to 32", c.CgroupDepth))
	}
	if c.CgroupfsPath != "" {
		if _, _, err := cgroup.HostMount(c.CgroupfsPath); err != nil {
			errs = append(errs, fmt.Errorf("--path.cgroupfs: %w, or leave the flag out", err))
		}
	}
	return errs
}

// validateListen checks where the observer listens, and that it needs a
// token to listen beyond loopback.
func (c Config) validateListen() []error {
	var errs []error
	if c.APITokenFile != "" {
		if _, err := ReadToken(c.APITokenFile); err != nil {
			errs = append(errs, err)
		}
	}
	if len(c.ListenAddresses) == 0 {
		errs = append(errs, errors.New("--web.listen-address: at least one address is needed"))
	}
	if c.AllowHostSettings && c.APITokenFile == "" && !c.AllowHostWithoutToken {
		errs = append(errs, errors.New("--settings.allow-host lets a request change the whole host's memory settings, and without --web.api-token-file any local user (and any container on the host's network) could: set a token file, or on a lab host of your own say --settings.allow-host-without-token"))
	}
	for _, addr := range c.ListenAddresses {
		loop, err := isLoopback(addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("--web.listen-address=%q: %w", addr, err))
		} else if !loop && c.APITokenFile == "" {
			errs = append(errs, fmt.Errorf("--web.listen-address=%q listens beyond loopback: set --web.api-token-file so runs cannot be started by anyone on the network, or listen on 127.0.0.1", addr))
		}
	}
	return errs
}

// maxTokenBytes bounds the token file; a token is tens of bytes.
const maxTokenBytes = 4 << 10

// ReadToken reads the API bearer token, refusing an empty one.
func ReadToken(path string) (string, error) {
	// Opened without blocking: a FIFO with no writer would hold the
	// observer at start with nothing logged. Only a regular file is read
	// (a Kubernetes secret's link to one is).
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("--web.api-token-file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("--web.api-token-file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("--web.api-token-file=%q is a %s, not a regular file: write the token to a file (e.g. openssl rand -hex 32 > token; chmod 600 token)", path, fileKind(fi.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return "", fmt.Errorf("--web.api-token-file: %w", err)
	}
	if len(b) > maxTokenBytes {
		return "", fmt.Errorf("--web.api-token-file=%q is larger than %d bytes: it should hold one token (e.g. openssl rand -hex 32)", path, maxTokenBytes)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("--web.api-token-file=%q is empty: put a random token in it (e.g. openssl rand -hex 32)", path)
	}
	return tok, nil
}

// fileKind names a mode's file type.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeCharDevice != 0:
		return "character device"
	case m&os.ModeDevice != 0:
		return "block device"
	case m.IsDir():
		return "directory"
	}
	return "special file"
}

// TokenFileExposed says, when the token file can be read or changed by
// users other than its owner and group, what that means and the fix; "" when
// it cannot (or cannot be checked).
func TokenFileExposed(path string) string {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o006 == 0 {
		return ""
	}
	return fmt.Sprintf("--web.api-token-file=%q has mode %04o: any local user can read the token and start or abort runs; chmod 600 it", path, fi.Mode().Perm())
}

// isLoopback reports whether a listen address binds to loopback only. An
// empty host binds every interface.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	if ip == nil {
		if host == "" {
			return false, nil
		}
		return false, fmt.Errorf("host %q is not an IP address or localhost", host)
	}
	return ip.IsLoopback(), nil
}
