package container

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, COPY, ...
	args []string
}

func dockerfile(t *testing.T) []instruction {
	t.Helper()
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ins []instruction
	var line string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || l == "" && line == "" {
			continue
		}
		if cont, ok := strings.CutSuffix(l, `\`); ok {
			line += cont + " "
			continue
		}
		line += l
		f := strings.Fields(line)
		ins = append(ins, instruction{cmd: strings.ToUpper(f[0]), args: f[1:]})
		line = ""
	}
	return ins
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// observerPath is where entrypoint.sh runs the observer from.
func observerPath(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("entrypoint.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^observer=(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("entrypoint.sh sets no observer=")
	}
	return string(m[1])
}

// TestDockerfile holds the recipe against the repository: the Go it builds
// with is go.mod's, it builds with make build, and it puts loadgen and
// thrashtool beside the observer where the entrypoint runs it.
func TestDockerfile(t *testing.T) {
	root := repoRoot(t)
	ins := dockerfile(t)
	var froms, runs []instruction
	var copies [][]string
	var entrypoint string
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			froms = append(froms, in)
		case "RUN":
			runs = append(runs, in)
		case "COPY":
			copies = append(copies, slices.DeleteFunc(slices.Clone(in.args), func(a string) bool { return strings.HasPrefix(a, "--chmod") }))
		case "ENTRYPOINT":
			entrypoint = strings.Join(in.args, " ")
		}
	}
	if len(froms) != 2 {
		t.Fatalf("%d stages, want a build and a runtime stage", len(froms))
	}

	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if image := froms[0].args[0]; goVersion == nil || !strings.HasPrefix(image, "golang:"+string(goVersion[1])+"-") {
		t.Errorf("build stage FROM %s, want golang:%s-<debian> as go.mod asks", image, goVersion[1])
	}
	if image := froms[1].args[0]; !regexp.MustCompile(`^debian:[a-z]+-slim$`).MatchString(image) {
		t.Errorf("runtime stage FROM %s, want a debian:<release>-slim", image)
	}
	if !slices.ContainsFunc(runs, func(r instruction) bool {
		s := strings.Join(r.args, " ")
		return strings.Contains(s, "make build") && strings.Contains(s, "CGO_ENABLED=0")
	}) {
		t.Error("no RUN CGO_ENABLED=0 make build: the image must build as README's make build does, statically")
	}

	// What the build stage copies from the context exists.
	bin := path.Dir(observerPath(t))
	var binaries []string
	for _, c := range copies {
		srcs, dst := c[:len(c)-1], c[len(c)-1]
		if strings.HasPrefix(srcs[0], "--from=") {
			for _, s := range srcs[1:] {
				binaries = append(binaries, path.Join(dst, path.Base(s)))
			}
			continue
		}
		for _, s := range srcs {
			if s == "." {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, s)); err != nil {
				t.Errorf("COPY %s: %v", s, err)
			}
		}
		if srcs[0] == "deploy/container/entrypoint.sh" && entrypoint != fmt.Sprintf(`["%s"]`, dst) {
			t.Errorf("ENTRYPOINT %s, want the copied entrypoint %s", entrypoint, dst)
		}
	}
	slices.Sort(binaries)
	if want := []string{bin + "/loadgen", bin + "/observer", bin + "/thrashtool"}; !slices.Equal(binaries, want) {
		t.Errorf("the image holds %v, want %v: the observer finds loadgen and thrashtool beside itself", binaries, want)
	}
}

// TestDockerignore: the ignore file keeps out bulk, not what the build reads.
func TestDockerignore(t *testing.T) {
	b, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	root := repoRoot(t)
	needed := []string{"go.mod", "go.sum", "Makefile", "cmd/observer/main.go", "cmd/loadgen/main.go", "deploy/container/entrypoint.sh"}
	objs, _ := filepath.Glob(filepath.Join(root, "internal", "probe", "*_bpfel.o"))
	if len(objs) == 0 {
		t.Fatal("no committed BPF objects in internal/probe")
	}
	for _, o := range objs {
		rel, _ := filepath.Rel(root, o)
		needed = append(needed, rel)
	}
	for _, l := range strings.Split(string(b), "\n") {
		pattern := strings.TrimSpace(l)
		if pattern == "" || strings.HasPrefix(pattern, "#") {
			continue
		}
		for _, n := range needed {
			first, _, _ := strings.Cut(n, "/")
			if m1, _ := path.Match(pattern, n); m1 {
				t.Errorf("Dockerfile.dockerignore %q excludes %s, which the build needs", pattern, n)
			} else if m2, _ := path.Match(pattern, first); m2 {
				t.Errorf("Dockerfile.dockerignore %q excludes %s, which the build needs", pattern, n)
			}
		}
	}
	// Podman's builder reads the context's own ignore file, not the
	// Dockerfile's: both must keep out the same.
	root2, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := patterns(string(root2)), patterns(string(b)); !slices.Equal(got, want) {
		t.Errorf("the repository's .dockerignore keeps out %v, Dockerfile.dockerignore %v: want the same", got, want)
	}
	if err := exec.Command("sh", "-n", "entrypoint.sh").Run(); err != nil {
		t.Errorf("sh -n entrypoint.sh: %v", err)
	}
}

// fakeObserver stands in for /usr/local/bin/observer: it prints its
// arguments and its cgroup.
const fakeObserver = `#!/bin/sh
echo "args: $*"
echo "cgroup: $(sed -n 's/^0:://p' /proc/self/cgroup)"
echo "writable: $(test -w /sys/fs/cgroup/cgroup.procs && echo yes || echo no)"
caps=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
echo "sys_admin: $(( 0x$caps >> 21 & 1 )) setpcap: $(( 0x$caps >> 8 & 1 ))"
`

// cgroup2Mount is where this machine mounts cgroup v2, from mountinfo.
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if i := slices.Index(f, "-"); i > 0 && i+1 < len(f) && f[i+1] == "cgroup2" && f[3] == "/" {
			return f[4]
		}
	}
	t.Fatal("no cgroup2 mount")
	return ""
}

// container is where entrypoint runs the script: in which cgroup (none: this
// process's), in the host's cgroup namespace or its own, with or without
// CAP_SYS_ADMIN.
type container struct {
	cgroup   string
	hostNS   bool
	sysAdmin bool
}

// entrypoint runs entrypoint.sh in its own mount namespace with the fake
// observer in place, after setup (shell) there, and returns what it printed.
// With cgroupDir set, it runs inside that cgroup, in a cgroup namespace
// rooted there, as a container does (in the host's, with hostNS). Without
// sysAdmin it runs as a container not given CAP_SYS_ADMIN.
func entrypoint(t *testing.T, c container, setup string, args ...string) string {
	t.Helper()
	unshare := testenv.RequireTool(t, "unshare", "util-linux")
	dir := t.TempDir()
	fake := filepath.Join(dir, "observer")
	if err := os.WriteFile(fake, []byte(fakeObserver), 0o755); err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs("entrypoint.sh")
	drop := ""
	if !c.sysAdmin {
		drop = testenv.RequireTool(t, "setpriv", "util-linux") + " --bounding-set=-sys_admin --inh-caps=-sys_admin --"
	}
	inner := fmt.Sprintf("set -e; mount -t tmpfs tmpfs /usr/local/bin; cp %s /usr/local/bin/observer; %s; exec %s sh %s %s",
		fake, setup, drop, script, strings.Join(args, " "))
	unshareArgs := []string{"--mount", "--propagation", "private", "--fork"}
	var cmd *exec.Cmd
	if c.cgroup == "" {
		cmd = exec.Command(unshare, append(unshareArgs, "sh", "-c", inner)...)
	} else {
		// Join the cgroup first, so the new cgroup namespace is rooted there.
		if !c.hostNS {
			unshareArgs = append([]string{"--cgroup"}, unshareArgs...)
		}
		outer := fmt.Sprintf(`echo $$ >%s/cgroup.procs && exec %s %s sh -c "$0"`, c.cgroup, unshare, strings.Join(unshareArgs, " "))
		cmd = exec.Command("sh", "-c", outer, inner)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("entrypoint: %v\n%s", err, out)
	}
	return string(out)
}

// testCgroup makes a cgroup v2 child of this process's own, removed (with
// whatever the entrypoint made in it) when the test ends.
func testCgroup(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	own := regexp.MustCompile(`(?m)^0::(\S+)$`).FindSubmatch(b)
	if own == nil {
		t.Fatal("no cgroup v2 line in /proc/self/cgroup")
	}
	dir := filepath.Join(cgroup2Mount(t), string(own[1]), fmt.Sprintf("thrashscope-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Remove(filepath.Join(dir, "observer"))
		if err := os.Remove(dir); err != nil {
			t.Error(err)
		}
	})
	return dir
}

// TestEntrypoint runs entrypoint.sh where a container would, with a
// stand-in observer. Flags pass through untouched, except that in a private
// cgroup namespace on cgroup v2 the container's processes move to the leaf
// observer/, and --cgroup.parent is added once memory is enabled at its root.
func TestEntrypoint(t *testing.T) {
	testenv.RequirePrivileged(t)
	const flags = "--web.listen-address=127.0.0.1:9752 --data.dir=/var/lib/thrashscope"

	t.Run("cgroup.parent given", func(t *testing.T) {
		out := entrypoint(t, container{sysAdmin: true}, "true", flags, "--cgroup.parent=/somewhere")
		if !strings.Contains(out, "args: "+flags+" --cgroup.parent=/somewhere\n") {
			t.Errorf("got\n%s", out)
		}
	})
	t.Run("cgroup v1", func(t *testing.T) {
		// A v1 or hybrid host mounts a tmpfs of hierarchies at /sys/fs/cgroup.
		out := entrypoint(t, container{sysAdmin: true}, "mount -t tmpfs tmpfs /sys/fs/cgroup", flags)
		if !strings.Contains(out, "args: "+flags+"\n") || strings.Contains(out, "thrashscope-entrypoint") {
			t.Errorf("got\n%s", out)
		}
	})
	t.Run("read-only cgroup v2", func(t *testing.T) {
		cg := testCgroup(t)
		out := entrypoint(t, container{cgroup: cg}, "mount -t cgroup2 -o ro cgroup2 /sys/fs/cgroup", flags)
		if !strings.Contains(out, "args: "+flags+"\n") || !strings.Contains(out, "cgroup: /\n") || !strings.Contains(out, "writable: no\n") {
			t.Errorf("an unprivileged container's cgroups were touched:\n%s", out)
		}
	})
	t.Run("read-only cgroup v2, CAP_SYS_ADMIN given", func(t *testing.T) {
		// The compose kit: the mount made writable, the container's
		// processes moved, and the observer started without the capability.
		cg := testCgroup(t)
		out := entrypoint(t, container{cgroup: cg, sysAdmin: true}, "mount -t cgroup2 -o ro cgroup2 /sys/fs/cgroup", flags)
		if !strings.Contains(out, "cgroup: /observer\n") || !strings.Contains(out, "sys_admin: 0 setpcap: 0\n") || !strings.Contains(out, "writable: yes\n") {
			t.Errorf("want the observer in observer/ without CAP_SYS_ADMIN:\n%s", out)
		}
	})
	t.Run("read-only cgroup v2, host's cgroup namespace", func(t *testing.T) {
		// Remounting there would open the host's whole tree: it is left
		// read-only, and the capability is not dropped.
		cg := testCgroup(t)
		out := entrypoint(t, container{cgroup: cg, hostNS: true, sysAdmin: true}, "mount -t cgroup2 -o ro cgroup2 /sys/fs/cgroup", flags)
		if !strings.Contains(out, "args: "+flags+"\n") || !strings.Contains(out, "writable: no\n") || !strings.Contains(out, "sys_admin: 1 setpcap: 1\n") || strings.Contains(out, "thrashscope-entrypoint") {
			t.Errorf("the host's cgroup namespace was touched:\n%s", out)
		}
	})
	t.Run("read-only bind of its own cgroup, host's cgroup namespace", func(t *testing.T) {
		// Podman on a cgroup v1 host: each hierarchy is the container's own
		// cgroup, bound read-only. That one is made writable.
		cg := testCgroup(t)
		setup := fmt.Sprintf("mount --bind %s /sys/fs/cgroup && mount -o remount,bind,ro /sys/fs/cgroup", cg)
		out := entrypoint(t, container{cgroup: cg, hostNS: true, sysAdmin: true}, setup, flags)
		if !strings.Contains(out, "args: "+flags+"\n") || !strings.Contains(out, "writable: yes\n") || !strings.Contains(out, "sys_admin: 0 setpcap: 0\n") {
			t.Errorf("want its own cgroup writable and the observer without CAP_SYS_ADMIN:\n%s", out)
		}
	})
	t.Run("private cgroup v2", func(t *testing.T) {
		cg := testCgroup(t)
		out := entrypoint(t, container{cgroup: cg, sysAdmin: true}, "mount -t cgroup2 cgroup2 /sys/fs/cgroup", flags)
		if !strings.Contains(out, "cgroup: /observer\n") {
			t.Errorf("the observer is not in the leaf observer/:\n%s", out)
		}
		procs, _ := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
		if len(strings.TrimSpace(string(procs))) > 0 {
			t.Errorf("processes left in the container's cgroup: %s", procs)
		}
		controllers, _ := os.ReadFile(filepath.Join(cg, "cgroup.controllers"))
		if slices.Contains(strings.Fields(string(controllers)), "memory") {
			ctl, _ := os.ReadFile(filepath.Join(cg, "cgroup.subtree_control"))
			if !strings.Contains(out, "args: --cgroup.parent=/sys/fs/cgroup "+flags+"\n") || !strings.Contains(string(ctl), "memory") {
				t.Errorf("memory is available but runs were not given the root:\n%s\nsubtree_control: %s", out, ctl)
			}
		} else {
			// This machine: memory is on cgroup v1, absent from v2.
			t.Log("memory is not on cgroup v2 here: checking the refusal")
			if !strings.Contains(out, "args: "+flags+"\n") || !strings.Contains(out, "cannot enable memory") {
				t.Errorf("without memory on v2, want the flags unchanged and a reason:\n%s", out)
			}
		}
	})
}

// patterns are an ignore file's lines that are patterns.
func patterns(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if p := strings.TrimSpace(l); p != "" && !strings.HasPrefix(p, "#") {
			out = append(out, p)
		}
	}
	return out
}
