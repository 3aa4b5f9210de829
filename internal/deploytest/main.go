// Command deploytest proves thrashscope's deploy kits in real engines on
// this machine (make test-deploy, root):
//   - the image from deploy/container/Dockerfile, built and run under
//     Podman with runc and the flags deploy/README.md gives;
//   - deploy/compose/compose.yaml under podman-compose: the observer,
//     Prometheus with the shipped rules and Alertmanager, and a small run
//     induced through the observer's API that fires
//     ThrashscopeHostThrashing into Alertmanager;
//   - the DaemonSet's pod template from deploy/kubernetes/observer.yaml as a
//     static pod under a kubelet and containerd.
//
// It installs what it needs from Debian's packages, PyPI and the Go module
// proxy, makes base images from Debian packages (no image registry is used),
// keeps what is slow to make (base images, the kubelet) in --cache, and
// removes everything it started: containers, pods, the kubelet, containerd,
// their cgroups, mounts, network interfaces and namespaces. What is left
// behind fails the run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// kit is one deploy kit proved in an engine.
type kit struct {
	name string
	run  func(e *env) (figures []string, err error)
}

var kits = []kit{
	{"image", (*env).proveImage},
	{"compose", (*env).proveCompose},
	{"kubelet", (*env).proveKubelet},
}

// notRun are the parts of the kits that cannot run on this kind of
// machine, and why.
var notRun = []string{
	"Grafana (the compose kit's grafana service): its server is not in Debian's packages, PyPI or npm, and no image registry is reachable; the dashboards are checked as data instead (go test ./dashboards, and every panel query against a real Prometheus in internal/observer)",
	"a full control plane (kube-apiserver, scheduler, the DaemonSet controller, the Service's kube-proxy rules, the ServiceMonitor): the DaemonSet's pod template runs as a static pod under a real kubelet, which is what the DaemonSet controller would hand it; the Service is scraped at the pod port it names",
}

func main() {
	cache := flag.String("cache", "/var/cache/thrashscope-deploy", "where base images, podman-compose and the kubelet are kept between runs")
	only := flag.String("only", "", "the kits to prove, comma-separated (image, compose, kubelet); all by default")
	prepare := flag.Bool("prepare", false, "only make what the kits need and --cache keeps (packages, base images, podman-compose, the kubelet, the pause image, the observer image's layers), proving none; run it at idle priority beside other work")
	kubeletOnly := flag.Bool("prepare-kubelet", false, "only build the kubelet into --cache, its Go caches and work in memory (/dev/shm), nothing installed or run: .ci/run does this at idle priority beside make test")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "deploytest: run as root: container engines, cgroups and BPF need it")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	if *kubeletOnly {
		os.Exit(prepareKubelet(ctx, *cache))
	}
	repo, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploytest:", err)
		os.Exit(2)
	}
	// The baseline is taken once the kits' packages are installed: what
	// the packages own (podman's /etc/containers, say) is the machine's,
	// not something a kit left.
	e, err := newEnv(ctx, repo, *cache)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploytest:", err)
		os.Exit(1)
	}
	before, err := takeSnapshot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploytest:", err)
		os.Exit(2)
	}
	e.logf("the baseline, after the packages: %s", before.owned())
	var results []result
	if *prepare {
		results = []result{e.prepare()}
	} else {
		results = e.prove(*only)
	}
	podmanLeft := e.podmanLeftovers()
	failed := e.close()
	for _, r := range clearFirstUse(before) {
		e.logf("removed what podman made at its first use: %s", r)
	}

	leftovers := append(podmanLeft, leftSince(before, *prepare)...)
	if report(results, leftovers) || failed {
		os.Exit(1)
	}
}

// leftSince is what is on the machine now that was not at before, less
// what make test or the matrix beside a --prepare makes.
func leftSince(before snapshot, prepare bool) []string {
	after, err := takeSnapshot()
	if err != nil {
		return []string{"reading what is left: " + err.Error()}
	}
	left := before.leftovers(after)
	if prepare {
		left = slices.DeleteFunc(left, besideTheTests)
	}
	return left
}

// prepareKubelet is --prepare-kubelet: its exit code.
func prepareKubelet(ctx context.Context, cache string) int {
	start := time.Now()
	if err := buildKubeletInMemory(ctx, cache); err != nil {
		fmt.Fprintln(os.Stderr, "deploytest: building the kubelet:", err)
		return 1
	}
	fmt.Printf("the kubelet is in %s (%s)\n", cache, time.Since(start).Round(time.Second))
	return 0
}

// result is one kit's proof.
type result struct {
	name    string
	took    time.Duration
	figures []string
	err     error
}

// prove proves each kit named in only (all when empty), cleaning up after
// each.
func (e *env) prove(only string) []result {
	var results []result
	for _, k := range kits {
		if only != "" && !slices.Contains(strings.Split(only, ","), k.name) {
			continue
		}
		e.logf("== %s", k.name)
		start := time.Now()
		figures, err := k.run(e)
		if cerr := e.cleanup(); err == nil {
			err = cerr
		}
		results = append(results, result{k.name, time.Since(start), figures, err})
		if err != nil {
			e.logf("%s: FAILED: %v", k.name, err)
		}
	}
	return results
}

// besideTheTests says whether something new since the baseline is what
// make test or the kernel matrix, running beside --prepare, makes and
// removes itself: its run
// cgroups and test groups (named thrashscope-…) and the processes its
// tests start. --prepare runs no container, so none of it is a kit's.
func besideTheTests(leftover string) bool {
	what, rest, _ := strings.Cut(leftover, " ")
	switch what {
	case "cgroup":
		return strings.Contains(rest, "/thrashscope-")
	case "process":
		_, exe, _ := strings.Cut(rest, " ")
		return slices.Contains([]string{"observer", "loadgen", "prometheus", "prometheus-alertmanager"}, filepath.Base(strings.TrimSuffix(exe, " (deleted)")))
	}
	return false
}

// prepare makes what the kits take from --cache, in the order they need
// it; the observer image's build leaves its layers for the image kit's.
func (e *env) prepare() result {
	start := time.Now()
	var figures []string
	err := e.ensureBaseImages()
	if err == nil {
		var took time.Duration
		took, err = e.buildObserverImage()
		figures = append(figures, fmt.Sprintf("image built in %s", took.Round(time.Second)))
	}
	if err == nil {
		_, err = e.ensurePodmanCompose()
	}
	if err == nil {
		_, err = e.ensureKubelet()
	}
	if err == nil {
		err = e.ensurePause()
	}
	if cerr := e.cleanup(); err == nil {
		err = cerr
	}
	if err != nil {
		e.logf("prepare: FAILED: %v", err)
	}
	return result{"prepare", time.Since(start), figures, err}
}

// report prints the kits' table, what was not run, and what was left
// behind; true when a kit failed or something was left.
func report(results []result, leftovers []string) (failed bool) {
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIT\tRESULT\tTOOK\tFIGURES")
	for _, r := range results {
		status := "pass"
		if r.err != nil {
			status = "FAIL: " + r.err.Error()
			failed = true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.name, status, r.took.Round(time.Second), strings.Join(r.figures, "; "))
	}
	tw.Flush()
	fmt.Println("\nNot run here:")
	for _, s := range notRun {
		fmt.Println("  - " + s)
	}
	if len(leftovers) > 0 {
		fmt.Println("\nLEFT BEHIND:")
		for _, l := range leftovers {
			fmt.Println("  - " + l)
		}
		return true
	}
	fmt.Println("\nNothing left behind: no container, pod, volume, process, cgroup, mount, network interface or namespace the kits started, and no file in the engines' state directories.")
	return failed
}

// repoRoot is the module root: where go.mod is, from the working
// directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "deploy", "container", "Dockerfile")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("run from the thrashscope repository (no deploy/container/Dockerfile above %s)", dir)
		}
		dir = parent
	}
}
