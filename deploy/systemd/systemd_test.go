package systemd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/unit"

	"github.com/thrashscope/thrashscope/internal/settings"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

const (
	unitName = "thrashscope.service"
	// installedBinary is where ExecStart= expects the observer.
	installedBinary = "/usr/local/bin/observer"
)

// specifiers are the unit's %-specifiers as systemd resolves them for a
// system service.
var specifiers = strings.NewReplacer("%n", unitName, "%S", "/var/lib", "%%", "%")

type unitFile []*unit.UnitOption

func readUnit(t *testing.T) unitFile {
	t.Helper()
	f, err := os.Open(unitName)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts, err := unit.DeserializeOptions(f)
	if err != nil {
		t.Fatalf("parsing %s: %v", unitName, err)
	}
	return opts
}

// values are every assignment of section.name, in order.
func (u unitFile) values(section, name string) []string {
	var vs []string
	for _, o := range u {
		if o.Section == section && o.Name == name {
			vs = append(vs, o.Value)
		}
	}
	return vs
}

// value is the one assignment of a [Service] setting.
func (u unitFile) value(t *testing.T, name string) string {
	t.Helper()
	vs := u.values("Service", name)
	if len(vs) != 1 {
		t.Fatalf("%s= is set %d times in %s, want once", name, len(vs), unitName)
	}
	return vs[0]
}

// words splits a command line as systemd does (quotes, line continuations)
// and resolves the specifiers. A leading "-" (ignore failure) is dropped.
func words(cmd string) []string {
	cmd = strings.ReplaceAll(cmd, "\\\n", " ")
	var out []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				out = append(out, specifiers.Replace(cur.String()))
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, specifiers.Replace(cur.String()))
	}
	if len(out) > 0 {
		out[0] = strings.TrimLeft(out[0], "-@:+!")
	}
	return out
}

func flag(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// capabilities are CapabilityBoundingSet= as setpriv names them (bpf, ...).
func (u unitFile) capabilities(t *testing.T) []string {
	t.Helper()
	var caps []string
	for _, c := range strings.Fields(u.value(t, "CapabilityBoundingSet")) {
		caps = append(caps, strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	return caps
}

func TestUnit(t *testing.T) {
	u := readUnit(t)
	start := words(u.value(t, "ExecStart"))
	if start[0] != installedBinary {
		t.Errorf("ExecStart runs %s, want %s", start[0], installedBinary)
	}
	if a := flag(start, "web.listen-address"); a != "127.0.0.1:9752" {
		t.Errorf("--web.listen-address=%q, want 127.0.0.1:9752: beyond loopback needs a token", a)
	}

	// Root, capabilities bounded to the proven set (TestCapabilities).
	for _, name := range []string{"User", "DynamicUser", "AmbientCapabilities"} {
		if vs := u.values("Service", name); len(vs) > 0 {
			t.Errorf("%s=%v: the observer runs as root with a bounding set", name, vs)
		}
	}
	caps := u.capabilities(t)
	slices.Sort(caps)
	if want := []string{"bpf", "dac_override", "perfmon"}; !slices.Equal(caps, want) {
		t.Errorf("CapabilityBoundingSet %v, want %v", caps, want)
	}

	// --data.dir is the StateDirectory.
	if got, want := flag(start, "data.dir"), "/var/lib/"+u.value(t, "StateDirectory"); got != want {
		t.Errorf("--data.dir=%s, want StateDirectory's %s", got, want)
	}

	// The host settings' state directory: the observer's default, kept
	// across restarts (a killed observer's journal is restored by the next
	// start), root's alone.
	if got := "/run/" + u.value(t, "RuntimeDirectory"); got != settings.DefaultStateDir {
		t.Errorf("RuntimeDirectory is %s, want the observer's --settings.state-dir default %s", got, settings.DefaultStateDir)
	}
	if u.value(t, "RuntimeDirectoryPreserve") != "yes" || u.value(t, "RuntimeDirectoryMode") != "0700" {
		t.Error("RuntimeDirectory must be kept across restarts (RuntimeDirectoryPreserve=yes) and root's alone (0700)")
	}

	// Run cgroups: the unit's own cgroup, delegated with memory, enabled by
	// ExecStartPre while the processes live in subgroups.
	unitCgroup := "/sys/fs/cgroup/" + u.value(t, "Slice") + "/" + unitName
	if got := flag(start, "cgroup.parent"); got != unitCgroup {
		t.Errorf("--cgroup.parent=%s, want the unit's cgroup %s", got, unitCgroup)
	}
	if d := u.value(t, "Delegate"); d != "yes" && !slices.Contains(strings.Fields(d), "memory") {
		t.Errorf("Delegate=%s does not delegate memory", d)
	}
	if sub := u.value(t, "DelegateSubgroup"); sub == "" || sub == ".control" || strings.Contains(sub, "/") {
		t.Errorf("DelegateSubgroup=%q: want a plain name for the observer's leaf", sub)
	}
	pre := u.value(t, "ExecStartPre")
	if !strings.HasPrefix(pre, "-") {
		t.Error("ExecStartPre= fails the unit where memory cannot be enabled (cgroup v1); prefix it with -")
	}
	if w := words(pre); len(w) != 3 || w[2] != "echo +memory > "+unitCgroup+"/cgroup.subtree_control" {
		t.Errorf("ExecStartPre=%v, want it to enable memory in %s", w, unitCgroup)
	}

	for name, want := range map[string]string{
		"LimitMEMLOCK":            "infinity",
		"Restart":                 "on-failure",
		"KillMode":                "mixed",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"NoNewPrivileges":         "yes",
		"LockPersonality":         "yes",
		"MemoryDenyWriteExecute":  "yes",
		"SystemCallArchitectures": "native",
		"RestrictNamespaces":      "yes",
		"RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
	} {
		if got := u.value(t, name); got != want {
			t.Errorf("%s=%s, want %s", name, got, want)
		}
	}
	// Each of these would break the observer.
	for name, why := range map[string]string{
		"ProtectKernelTunables": "makes /sys/fs/cgroup read-only",
		"ProtectControlGroups":  "makes /sys/fs/cgroup read-only",
		"ProtectProc":           "hides other processes",
		"ProcSubset":            "hides /proc/stat, vmstat and pressure",
		"PrivateUsers":          "drops BPF",
		"PrivateNetwork":        "cuts Prometheus off",
	} {
		if vs := u.values("Service", name); len(vs) > 0 {
			t.Errorf("%s=%v %s", name, vs, why)
		}
	}
}

// installable copies the unit to a temporary directory with ExecStart
// pointing at a real observer binary, as systemd-analyze checks that the
// binary exists.
func installable(t *testing.T, edit func(string) string) string {
	t.Helper()
	b, err := os.ReadFile(unitName)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(b), installedBinary, testenv.Binary(t, "observer"))
	if edit != nil {
		s = edit(s)
	}
	path := filepath.Join(t.TempDir(), unitName)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// systemdVersion is the major version systemd-analyze reports.
func systemdVersion(t *testing.T, analyze string) int {
	t.Helper()
	out, err := exec.Command(analyze, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if _, err := fmt.Sscanf(string(out), "systemd %d", &v); err != nil {
		t.Fatalf("systemd-analyze --version: %q: %v", out, err)
	}
	return v
}

// verify runs systemd-analyze verify and returns the lines it printed that
// this systemd's age does not explain.
func verify(t *testing.T, analyze, path string) []string {
	t.Helper()
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	var complaints []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// DelegateSubgroup= came with systemd 254.
		if l == "" || systemdVersion(t, analyze) < 254 && strings.Contains(l, "Unknown key 'DelegateSubgroup'") {
			continue
		}
		complaints = append(complaints, l)
	}
	if err != nil && len(complaints) == 0 {
		complaints = append(complaints, err.Error())
	}
	return complaints
}

// TestVerify: systemd-analyze verify accepts the unit: every setting is
// known and well-formed, the binaries exist, the dependencies resolve. On
// systemd older than 254 it only reports DelegateSubgroup= unknown.
func TestVerify(t *testing.T) {
	analyze := testenv.RequireTool(t, "systemd-analyze", "systemd")
	if c := verify(t, analyze, installable(t, nil)); len(c) > 0 {
		t.Errorf("systemd-analyze verify %s:\n%s", unitName, strings.Join(c, "\n"))
	}
	// The check can fail: a misspelt setting is reported.
	bad := installable(t, func(s string) string { return strings.Replace(s, "ProtectHome=", "ProtectHomes=", 1) })
	if c := verify(t, analyze, bad); !slices.ContainsFunc(c, func(l string) bool { return strings.Contains(l, "ProtectHomes") }) {
		t.Errorf("systemd-analyze verify missed a misspelt setting: %q", c)
	}
}

// TestSecurity: systemd-analyze's exposure score of the unit stays low.
// systemd is not PID 1 here, so it scores the file (--offline), as it would
// a loaded unit.
func TestSecurity(t *testing.T) {
	analyze := testenv.RequireTool(t, "systemd-analyze", "systemd")
	if v := systemdVersion(t, analyze); v < 250 {
		testenv.Unavailable(t, fmt.Sprintf("systemd-analyze security --offline needs systemd 250 or later, this is %d: install a newer systemd", v))
	}
	out, _ := exec.Command(analyze, "security", "--offline=true", "--no-pager", installable(t, nil)).Output()
	m := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(unitName) + `: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security printed no exposure level:\n%s", out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("exposure %.1f", score)
	// 2.7 today (0 is fully locked down, 10 unprotected): root, BPF,
	// DAC_OVERRIDE, cgroup writes, the network and all of /proc are what the
	// observer is for.
	if score > 3.0 {
		t.Errorf("exposure level %.1f, want 3.0 or less:\n%s", score, out)
	}
}

// TestExecStartPre runs ExecStartPre= against a stand-in cgroup tree: it
// writes +memory into the unit cgroup's subtree_control.
func TestExecStartPre(t *testing.T) {
	sh := words(readUnit(t).value(t, "ExecStartPre"))
	root := t.TempDir()
	ctl := filepath.Join(root, "system.slice", unitName, "cgroup.subtree_control")
	if err := os.MkdirAll(filepath.Dir(ctl), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ctl, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sh[2] = strings.ReplaceAll(sh[2], "/sys/fs/cgroup", root)
	if out, err := exec.Command(sh[0], sh[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", sh, err, out)
	}
	if b, _ := os.ReadFile(ctl); string(b) != "+memory\n" {
		t.Errorf("subtree_control got %q, want +memory", b)
	}
}

// confined runs argv as the unit would: root with only caps in the bounding
// set, no new privileges, and LimitMEMLOCK where this machine lets the test
// raise it (the kernel charges BPF memory to the cgroup since 5.11, so the
// limit matters only to older kernels).
func confined(u unitFile, t *testing.T, caps []string, argv ...string) *exec.Cmd {
	t.Helper()
	setpriv := testenv.RequireTool(t, "setpriv", "util-linux")
	bset := "-all"
	for _, c := range caps {
		bset += ",+" + c
	}
	args := append([]string{setpriv, "--bounding-set=" + bset, "--inh-caps=-all", "--no-new-privs", "--"}, argv...)
	if memlock := u.value(t, "LimitMEMLOCK"); memlock != "infinity" {
		t.Fatalf("LimitMEMLOCK=%s: the test knows infinity only", memlock)
	}
	prlimit := testenv.RequireTool(t, "prlimit", "util-linux")
	raise := []string{prlimit, "--memlock=unlimited:unlimited"}
	if exec.Command(raise[0], append(raise[1:], "true")...).Run() == nil {
		args = append(raise, args...)
	} else {
		memlockOnce.Do(func() {
			t.Log("cannot raise RLIMIT_MEMLOCK here (no CAP_SYS_RESOURCE): running with the current limit")
		})
	}
	return exec.Command(args[0], args[1:]...)
}

var memlockOnce sync.Once

// observerArgs is ExecStart= for this machine: data in dir, and no
// --cgroup.parent where the unit's cgroup does not exist (no systemd here;
// runs nest in the test's own memory cgroup instead).
func observerArgs(t *testing.T, u unitFile, dir string) []string {
	t.Helper()
	var args []string
	for _, a := range words(u.value(t, "ExecStart"))[1:] {
		switch {
		case strings.HasPrefix(a, "--data.dir="):
			a = "--data.dir=" + dir
		case strings.HasPrefix(a, "--cgroup.parent="):
			if _, err := os.Stat(strings.TrimPrefix(a, "--cgroup.parent=")); err != nil {
				continue
			}
		}
		args = append(args, a)
	}
	return args
}

// sleeper starts a process that the witnesses inspect, as root with every
// capability or as nobody.
func sleeper(t *testing.T, asNobody bool) int {
	t.Helper()
	cmd := exec.Command("sleep", "120")
	if asNobody {
		cmd = exec.Command(testenv.RequireTool(t, "setpriv", "util-linux"), "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "120")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Wait for the exec, so /proc/<pid> shows sleep's owner.
	for i := 0; i < 200; i++ {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid)); string(b) == "sleep\n" {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cmd.Process.Pid
}

// TestCapabilities shows the bounding set is enough and minimal: every
// witness (what the observer does with its privileges) succeeds with the
// unit's capabilities, and dropping any one of them fails a witness.
func TestCapabilities(t *testing.T) {
	testenv.RequirePrivileged(t)
	u := readUnit(t)
	caps := u.capabilities(t)
	bin := testenv.Binary(t, "observer")
	nobody, root := sleeper(t, true), sleeper(t, false)
	shell := func(script string) []string { return []string{"/bin/sh", "-c", script} }
	witnesses := []struct {
		what string
		argv []string
	}{
		{"load and attach the BPF probes (observer --check)", append(append([]string{bin}, observerArgs(t, u, t.TempDir())...), "--check")},
		{"read a nobody process's smaps", shell(fmt.Sprintf("head -c1 /proc/%d/smaps >/dev/null", nobody))},
		{"read a root process's smaps", shell(fmt.Sprintf("head -c1 /proc/%d/smaps >/dev/null", root))},
		{"clear a nobody process's referenced bits", shell(fmt.Sprintf("echo 1 >/proc/%d/clear_refs", nobody))},
		{"clear a root process's referenced bits", shell(fmt.Sprintf("echo 1 >/proc/%d/clear_refs", root))},
	}
	for _, w := range witnesses {
		if out, err := confined(u, t, caps, w.argv...).CombinedOutput(); err != nil {
			t.Errorf("with %v: cannot %s: %v\n%s", caps, w.what, err, out)
		}
	}
	for _, drop := range caps {
		less := slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return c == drop })
		var failed []string
		for _, w := range witnesses {
			if confined(u, t, less, w.argv...).Run() != nil {
				failed = append(failed, w.what)
			}
		}
		if len(failed) == 0 {
			t.Errorf("without CAP_%s every witness still succeeds: it is not needed", strings.ToUpper(drop))
		} else {
			t.Logf("without CAP_%s the observer cannot %s", strings.ToUpper(drop), strings.Join(failed, "; "))
		}
	}
}

// freePort is a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// run is the part of a run record the test reads.
type run struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Consumers []struct {
		ActualStart string `json:"actual_start"`
		Cycles      int    `json:"cycles"`
		Exit        string `json:"exit"`
	} `json:"consumers"`
}

func request(t *testing.T, method, url, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestHardeningAdmitsARealRun runs the real observer confined as the unit
// confines it, traced by strace, through a file-backed run that it aborts:
// BPF probes, working sets, a run cgroup, consumers started and killed. Every
// system call it and its consumers make must pass SystemCallFilter=, every
// socket RestrictAddressFamilies=, no mapping may be writable and executable
// (MemoryDenyWriteExecute=), and no namespace may be made
// (RestrictNamespaces=). So the unit's sandbox does not break what was
// traced; it cannot show the same for code paths the run did not take.
func TestHardeningAdmitsARealRun(t *testing.T) {
	testenv.RequirePrivileged(t)
	strace := testenv.RequireTool(t, "strace", "strace")
	analyze := testenv.RequireTool(t, "systemd-analyze", "systemd")
	u := readUnit(t)
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace")
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)

	args := observerArgs(t, u, filepath.Join(dir, "data"))
	for i, a := range args {
		if strings.HasPrefix(a, "--web.listen-address=") {
			args[i] = fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port)
		}
	}
	// BPF or fail: procfs alone would trace a different observer. The
	// run's consumers live 3 s, less than the default --wss.period: a
	// window every second gives each one a working set.
	args = append(args, "--probes=bpf", "--wss.period=1s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs := confined(u, t, u.capabilities(t), append([]string{filepath.Join(testenv.BinaryDir(t), "observer")}, args...)...)
	cmd := exec.CommandContext(ctx, strace, append([]string{"-f", "-qq", "-o", trace}, obs.Args...)...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	ready := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if code, _ := request(t, "GET", base+"/readyz", ""); code == http.StatusOK {
			ready = true
			break
		}
	}
	if !ready {
		t.Fatalf("the confined observer never got ready:\n%s", log.Bytes())
	}
	// The observer is strace's first tracee (setpriv, then exec). Killing
	// strace would only detach it, so it is stopped by pid.
	first, err := os.ReadFile(trace)
	if err != nil || len(strings.Fields(string(first))) == 0 {
		t.Fatalf("reading the trace: %v", err)
	}
	pid, _ := strconv.Atoi(strings.Fields(string(first))[0])
	defer func() { _ = syscall.Kill(pid, syscall.SIGKILL) }()
	spec := `{"preset":"e4","consumers":2,"size_bytes":8388608,"interval":"1s","lead_in":"1s","memory_limit_bytes":33554432,"backing":"file"}`
	code, b := request(t, "POST", base+"/api/v1/runs", spec)
	var r run
	if code != http.StatusCreated || json.Unmarshal(b, &r) != nil {
		t.Fatalf("starting a run: %d %s", code, b)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, b = request(t, "GET", base+"/api/v1/runs/"+r.ID, "")
		_ = json.Unmarshal(b, &r)
		if len(r.Consumers) == 2 && r.Consumers[1].ActualStart != "" && r.Consumers[1].Cycles > 0 {
			break
		}
		if time.Now().After(deadline) || r.State != "running" {
			t.Fatalf("the run's consumers did not both start: %s", b)
		}
	}
	// A working set needs a clear and a read a window apart after the
	// consumer is first seen, so it is polled for, not read once.
	measured := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		_, metrics := request(t, "GET", base+"/metrics", "")
		testenv.NoDuplicateSeries(t, string(metrics))
		if measured = bytes.Contains(metrics, []byte(`thrashscope_process_working_set_bytes{comm="consumer-00"`)); measured {
			break
		}
	}
	if !measured {
		t.Error("no working set for consumer-00 in 30 s: clear_refs or smaps failed under the unit's limits")
	}
	code, b = request(t, "DELETE", base+"/api/v1/runs/"+r.ID, "")
	if err := json.Unmarshal(b, &r); code != http.StatusOK || err != nil || r.State != "aborted" {
		t.Fatalf("aborting the run: %d %s", code, b)
	}
	for i, c := range r.Consumers {
		if c.Cycles == 0 || c.Exit == "" {
			t.Errorf("consumer %d: %d cycles, exit %q", i, c.Cycles, c.Exit)
		}
	}

	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("observer under strace: %v\n%s", err, log.Bytes())
	}
	checkTrace(t, u, analyze, trace, pid)
}

// checkTrace holds a strace -f log against the unit's sandbox, from pid's
// exec of the observer on (setpriv's own calls come before it).
func checkTrace(t *testing.T, u unitFile, analyze, trace string, pid int) {
	t.Helper()
	allowed := map[string]bool{}
	for _, v := range u.values("Service", "SystemCallFilter") {
		if strings.HasPrefix(v, "~") {
			t.Fatalf("SystemCallFilter=%s: the test reads allow lists only", v)
		}
		for _, name := range strings.Fields(v) {
			for _, s := range syscallSet(t, analyze, name) {
				allowed[s] = true
			}
		}
	}
	families := strings.Fields(u.value(t, "RestrictAddressFamilies"))

	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`^(\d+) +(?:<\.\.\. (\w+) resumed>|(\w+)\()`)
	socket := regexp.MustCompile(`socket\((AF_\w+)`)
	wx := regexp.MustCompile(`^\d+ +(mmap|mprotect|pkey_mprotect)\(.*(PROT_WRITE\|.*PROT_EXEC|PROT_EXEC\|.*PROT_WRITE)`)
	observerExec := regexp.MustCompile(`execve\("[^"]*/observer"`)
	started := false
	outside, seen := map[string]int{}, map[string]bool{}
	lines := 0
	for _, l := range strings.Split(string(b), "\n") {
		m := call.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name := m[2] + m[3]
		if p, _ := strconv.Atoi(m[1]); p == pid && !started {
			started = name == "execve" && observerExec.MatchString(l) && strings.HasSuffix(l, "= 0")
			continue
		}
		lines++
		seen[name] = true
		if !allowed[name] {
			outside[name]++
		}
		if s := socket.FindStringSubmatch(l); s != nil && !slices.Contains(families, s[1]) {
			t.Errorf("socket family %s is outside RestrictAddressFamilies=%v: %s", s[1], families, l)
		}
		if wx.MatchString(l) {
			t.Errorf("a writable and executable mapping breaks MemoryDenyWriteExecute=: %s", l)
		}
		if name == "unshare" || name == "setns" || strings.Contains(l, "CLONE_NEW") {
			t.Errorf("a new namespace breaks RestrictNamespaces=: %s", l)
		}
	}
	if !started || lines < 1000 || !seen["bpf"] || !seen["perf_event_open"] {
		t.Fatalf("the trace does not cover the observer (exec seen %v, %d calls, bpf %v, perf_event_open %v)", started, lines, seen["bpf"], seen["perf_event_open"])
	}
	if len(outside) > 0 {
		t.Errorf("system calls outside SystemCallFilter= (they would fail with EPERM): %v", outside)
	}
	t.Logf("%d system calls of %d kinds, all admitted", lines, len(seen))
}

// syscallSet expands a SystemCallFilter= entry: a name, or a @group with
// nested groups, as this systemd defines them.
func syscallSet(t *testing.T, analyze, name string) []string {
	t.Helper()
	if !strings.HasPrefix(name, "@") {
		return []string{name}
	}
	out, err := exec.Command(analyze, "syscall-filter", "--no-pager", name).Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter %s: %v", name, err)
	}
	var set []string
	for i, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if i == 0 || len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		set = append(set, syscallSet(t, analyze, f[0])...)
	}
	return set
}
