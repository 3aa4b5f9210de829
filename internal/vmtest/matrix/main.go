// Command matrix is make test-kernels: it builds thrashscope and its tests
// static, boots each kernel of the matrix in qemu with them (package
// vmtest), and prints one table of what passed where. It exits non-zero
// when a kernel cannot be fetched or booted, or a step fails.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/internal/testenv"
	"github.com/thrashscope/thrashscope/internal/vmtest"
)

func main() {
	cache := flag.String("cache", "bin/kernels", "where the kernels' packages are unpacked, and kept")
	work := flag.String("work", "bin/vmtest", "where the guest's binaries, initramfs and console logs go")
	kernels := flag.String("kernels", "", "comma-separated kernels to boot instead of the whole matrix: the matrix's own by version (5.10), or Debian packages (linux-image-6.1.0-56-amd64)")
	only := flag.String("steps", "", "comma-separated step names to run (default every step)")
	markdown := flag.String("markdown", "", "also write the tables as Markdown to this file: between its "+vmtest.MarkdownBegin+" and "+vmtest.MarkdownEnd+" lines where it has them (docs/kernels.md), else the whole file")
	summary := flag.String("summary", "", "also put the summary table in this file, between its "+vmtest.SummaryBegin+" and "+vmtest.SummaryEnd+" lines (README.md)")
	accel := flag.String("accel", "auto", "auto (KVM when a guest boots on it, else TCG), kvm or tcg")
	flag.IntVar(&logLevel, "loglevel", 4, "the guest kernel's console log level (7 shows a lockup's stack)")
	parallel := flag.Int("parallel", max(1, min(runtime.NumCPU()/2, 3)), "guests booted at once: one per two cores (docs/kernels.md: two at once on 2 cores ran as fast, but a 6.12 guest's kernel crashed in one of two tries)")
	prepare := flag.Bool("prepare", false, "only build the guest's binaries and fetch the kernels, booting none: .ci/run does this beside make test")
	flag.StringVar(&compareOut, "compare-out", "", "instead of the steps, run `observer compare` in each guest with the arguments after --, and copy its --out to this directory (<dir>/<kernel release>/): a comparison of settings on another kernel")
	flag.Parse()

	// Interrupted, it stops its guest and removes the guest's disks and
	// initramfs before it exits, as at a kernel's end.
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sigCtx, 80*time.Minute)
	defer cancel()
	if *parallel < 1 {
		fmt.Fprintln(os.Stderr, "test-kernels: --parallel must be at least 1")
		os.Exit(2)
	}
	o := options{cache: *cache, work: *work, kernels: *kernels, only: *only, markdown: *markdown, summary: *summary,
		accel: *accel, parallel: *parallel, prepare: *prepare}
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "test-kernels:", err)
		os.Exit(1)
	}
}

var (
	logLevel   int
	compareOut string
)

// compareStep runs observer compare in the guest, its --out on the data
// disk, for the host to copy out.
func compareStep(args []string) step {
	return step{Step: vmtest.Step{Name: "compare", Path: vmtest.GuestBin + "/observer", TimeoutSeconds: 3 * 3600,
		Args: append(append([]string{"compare"}, args...), "--out", "/var/tmp/compare")}}
}

// options are the command's flags.
type options struct {
	cache, work, kernels, only, markdown, summary, accel string
	parallel                                             int
	prepare                                              bool
}

// kernelNamed is the matrix's kernel whose name starts with p's version
// ("5.10" for "5.10 (Debian 11)"), else Debian's package p of the default
// suite.
func kernelNamed(p string) vmtest.Kernel {
	for _, k := range vmtest.Matrix {
		if v, _, _ := strings.Cut(k.Name, " "); v == p {
			return k
		}
	}
	return vmtest.Kernel{Name: p, Package: p}
}

func run(ctx context.Context, o options) error {
	matrix := vmtest.Matrix
	if o.kernels != "" {
		matrix = nil
		for _, p := range strings.Split(o.kernels, ",") {
			matrix = append(matrix, kernelNamed(p))
		}
	}
	for _, tool := range []string{"qemu-system-x86_64", "apt-get", "dpkg-deb", "depmod"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing: install qemu-system-x86, busybox-static and kmod (.ci/run does)", tool)
		}
	}
	guest, err := build(ctx, o.work, o.only)
	if err != nil {
		return err
	}
	// Fetched one after the other: kernels of one suite share its package
	// lists in the cache.
	images := make([]vmtest.Image, len(matrix))
	fetchErr := make([]error, len(matrix))
	for i, k := range matrix {
		images[i], fetchErr[i] = vmtest.Fetch(ctx, k, o.cache)
		if o.prepare && fetchErr[i] != nil {
			return fmt.Errorf("fetching %s: %w", k.Name, fetchErr[i])
		}
	}
	if o.prepare {
		fmt.Printf("prepared: the guest's binaries in %s, %d kernels in %s\n", o.work, len(matrix), o.cache)
		return nil
	}
	results := boot(ctx, o, matrix, images, fetchErr, guest)
	if o.markdown != "" {
		if err := writeMarkdown(o.markdown, vmtest.Markdown(results)); err != nil {
			return err
		}
	}
	if o.summary != "" {
		if err := writeSummary(o.summary, vmtest.Summary(results)); err != nil {
			return err
		}
	}
	return failures(o.work, results)
}

// boot boots the kernels, o.parallel at once, and returns their results in
// the matrix's order; the table of those done so far is printed as each
// ends.
func boot(ctx context.Context, o options, matrix []vmtest.Kernel, images []vmtest.Image, fetchErr []error, guest vmtest.Guest) []vmtest.KernelResult {
	m := vmtest.Machine{Accel: o.accel, CPUs: 2, Memory: "3G", SwapBytes: 2 << 30, LogLevel: logLevel}
	results := make([]vmtest.KernelResult, len(matrix))
	ended := make([]bool, len(matrix))
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, o.parallel)
	for i, k := range matrix {
		slots <- struct{}{} // in the matrix's order
		wg.Go(func() {
			defer func() { <-slots }()
			var res vmtest.KernelResult
			if fetchErr[i] != nil {
				res = vmtest.KernelResult{Kernel: k, Err: fetchErr[i].Error()}
			} else {
				km := m
				if compareOut != "" {
					km.Extract = map[string]string{"/compare": filepath.Join(compareOut, strings.Fields(k.Name)[0])}
				}
				res = bootOne(ctx, images[i], guest, km, o.work)
			}
			mu.Lock()
			defer mu.Unlock()
			results[i], ended[i] = res, true
			var done []vmtest.KernelResult
			for j := range results {
				if ended[j] {
					done = append(done, results[j])
				}
			}
			fmt.Println(vmtest.Table(done))
		})
	}
	wg.Wait()
	return results
}

// bootOne makes a fetched kernel's initramfs and boots it.
func bootOne(ctx context.Context, im vmtest.Image, g vmtest.Guest, m vmtest.Machine, work string) vmtest.KernelResult {
	k := im.Kernel
	res := vmtest.KernelResult{Kernel: k, Image: im}
	start := time.Now()
	g.Steps = slices.DeleteFunc(slices.Clone(g.Steps), func(st vmtest.Step) bool { return slices.Contains(k.Skip, st.Name) })
	initramfs := filepath.Join(work, im.Release+".cpio")
	f, err := os.Create(initramfs)
	if err == nil {
		err = g.WriteInitramfs(f, im)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		res.Err = "making the initramfs: " + err.Error()
		return res
	}
	defer os.Remove(initramfs)
	logPath := filepath.Join(work, im.Release+".console.log")
	log, err := os.Create(logPath)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer log.Close()
	m.Accel = pickAccel(ctx, m, im, work)
	res.Accel = m.Accel
	fmt.Printf("== %s (%s, %s): booting under %s; the console goes to %s\n", k.Name, im.Image, im.Release, m.Accel, logPath)
	bctx, cancel := context.WithTimeout(ctx, 40*time.Minute)
	defer cancel()
	before, herr := sampleHost()
	var qemuCPU time.Duration
	m.CPUTime = &qemuCPU
	res.Reports, err = m.Boot(bctx, im, initramfs, work, io.MultiWriter(log, &progress{prefix: strings.Fields(k.Name)[0] + ": "}))
	if err != nil {
		res.Err = err.Error()
	}
	if after, aerr := sampleHost(); herr == nil && aerr == nil {
		res.Host = hostMeanwhile(before, after, qemuCPU)
	}
	res.Seconds = time.Since(start).Seconds()
	return res
}

// pickAccel is KVM when asked, or, for auto, when an empty plan boots on
// it within 20 s; else TCG. On the project's machines a KVM guest fails at
// once or hangs before the kernel prints anything.
func pickAccel(ctx context.Context, m vmtest.Machine, im vmtest.Image, work string) string {
	if m.Accel != "auto" {
		return m.Accel
	}
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return "tcg"
	}
	probe := filepath.Join(work, im.Release+"-kvm-probe.cpio")
	f, err := os.Create(probe)
	if err != nil {
		return "tcg"
	}
	defer os.Remove(probe)
	err = vmtest.Guest{Init: filepath.Join(work, "init"), Busybox: "/bin/busybox"}.WriteInitramfs(f, im)
	f.Close()
	if err != nil {
		return "tcg"
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	kvm := m
	kvm.Accel, kvm.SwapBytes = "kvm", 64<<20
	if _, err := kvm.Boot(pctx, im, probe, work, io.Discard); err != nil {
		return "tcg"
	}
	return "kvm"
}

// progress echoes the guest's reports and failures as they come, a whole
// line at a time.
type progress struct {
	prefix string // the kernel's, as guests boot side by side
	buf    []byte
}

func (p *progress) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := strings.TrimLeft(string(p.buf[:i+1]), "\r")
		p.buf = p.buf[i+1:]
		if strings.HasPrefix(line, vmtest.ReportPrefix) || strings.Contains(line, "--- FAIL") || strings.Contains(line, "--- PASS") || strings.Contains(line, "Kernel panic") {
			fmt.Print(p.prefix + line)
		}
	}
}

// build makes the guest's files: the init, observer, loadgen and the test
// binaries, all static.
func build(ctx context.Context, work, only string) (vmtest.Guest, error) {
	bin := filepath.Join(work, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return vmtest.Guest{}, err
	}
	g := vmtest.Guest{
		Init: filepath.Join(work, "init"), Busybox: "/bin/busybox",
		Binaries: map[string]string{}, Src: map[string]string{},
		Env: []string{"PATH=/bin:" + vmtest.GuestBin, "HOME=/root", "TMPDIR=/tmp",
			testenv.RequireEnv + "=1", testenv.BinariesEnv + "=" + vmtest.GuestBin},
	}
	gobuild := func(out string, args ...string) error {
		cmd := exec.CommandContext(ctx, "go", append(args[:1:1], append([]string{"-o", out}, args[1:]...)...)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		return cmd.Run()
	}
	if err := gobuild(g.Init, "build", "./internal/vmtest/guest"); err != nil {
		return g, fmt.Errorf("building the guest init: %w", err)
	}
	for _, cmdName := range []string{"observer", "loadgen"} {
		out := filepath.Join(bin, cmdName)
		if err := gobuild(out, "build", "./cmd/"+cmdName); err != nil {
			return g, fmt.Errorf("building %s: %w", cmdName, err)
		}
		g.Binaries[cmdName] = out
	}
	if _, err := os.Stat(g.Busybox); err != nil {
		return g, fmt.Errorf("no static busybox at %s: install busybox-static", g.Busybox)
	}
	return g, addSteps(&g, bin, only, gobuild)
}

// addSteps builds each step's test binary and puts the steps in the
// guest's plan: those named in only (all when empty), or the comparison.
func addSteps(g *vmtest.Guest, bin, only string, gobuild func(out string, args ...string) error) error {
	wanted := map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s != "" {
			wanted[s] = true
		}
	}
	steps := Steps
	if compareOut != "" {
		steps = []step{compareStep(flag.Args())}
		for _, cmdName := range []string{"thrashtool"} { // observer compare hands over to it
			out := filepath.Join(bin, cmdName)
			if err := gobuild(out, "build", "./cmd/"+cmdName); err != nil {
				return fmt.Errorf("building %s: %w", cmdName, err)
			}
			g.Binaries[cmdName] = out
		}
	}
	for _, st := range steps {
		if len(wanted) > 0 && !wanted[st.Name] {
			continue
		}
		if st.Package != "" {
			name := filepath.Base(st.Package) + ".test"
			out := filepath.Join(bin, name)
			if _, ok := g.Binaries[name]; !ok {
				if err := gobuild(out, "test", "-c", "./"+st.Package); err != nil {
					return fmt.Errorf("building %s's tests: %w", st.Package, err)
				}
				g.Binaries[name] = out
				if _, err := os.Stat(filepath.Join(st.Package, "testdata")); err == nil {
					g.Src[filepath.Join(st.Package, "testdata")] = filepath.Join(st.Package, "testdata")
				}
			}
			st.Step.Path, st.Step.Dir = filepath.Join(vmtest.GuestBin, name), st.Package
		}
		g.Steps = append(g.Steps, st.Step)
	}
	return nil
}

// writeMarkdown puts the tables in a file: between its marker lines where
// it has them, so a page's own text stays; else as the whole file.
func writeMarkdown(path, tables string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	text, ok := vmtest.Splice(string(old), vmtest.MarkdownBegin, vmtest.MarkdownEnd, tables)
	if !ok {
		text = tables
	}
	return replaceFile(path, text)
}

// writeSummary puts the summary table between a page's summary markers,
// which it must have.
func writeSummary(path, table string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text, ok := vmtest.Splice(string(old), vmtest.SummaryBegin, vmtest.SummaryEnd, table)
	if !ok {
		return fmt.Errorf("%s has no %s and %s lines to put the summary between", path, vmtest.SummaryBegin, vmtest.SummaryEnd)
	}
	return replaceFile(path, text)
}

func replaceFile(path, text string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// failures prints what failed, if anything, and says so.
func failures(work string, results []vmtest.KernelResult) error {
	failed := false
	for _, r := range results {
		failed = failed || !r.Pass()
	}
	if failed {
		// A CI run keeps only the end of its output, and the console logs
		// stay on its machine: the end of each failed guest's console is
		// what says why (a panic, a hung step, an init error).
		for _, r := range results {
			if !r.Pass() && r.Image.Release != "" {
				printTail(filepath.Join(work, r.Image.Release+".console.log"), consoleTailLines)
			}
		}
		// Last, so that the end of a long run's output says what failed.
		fmt.Println("FAILED:")
		for _, f := range vmtest.Failures(results) {
			fmt.Println("  " + f)
		}
		return fmt.Errorf("a kernel failed; the console logs are in %s", work)
	}
	return nil
}

// consoleTailLines is how much of a failed guest's console is printed.
const consoleTailLines = 40

// printTail prints the last n lines of the console log at path.
func printTail(path string, n int) {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Printf("no console log to show: %v\n", err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	fmt.Printf("== the last %d lines of %s\n", len(lines), path)
	for _, l := range lines {
		fmt.Println("  " + strings.TrimRight(l, "\r"))
	}
}
