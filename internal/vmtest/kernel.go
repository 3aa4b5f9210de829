// Package vmtest runs thrashscope's functional tests on other kernels: each
// kernel of a matrix, taken from Debian's packages, is booted in qemu (TCG:
// a KVM guest hangs on the project's machines, so KVM is only tried as a
// speed-up) with an initramfs of thrashscope's own: a small init (package
// vmtest/guest), busybox, the kernel's modules for a swap disk, the static
// observer and loadgen, and the test binaries. The guest is pure cgroup v2
// with swap and its kernel's BTF; it runs a plan of steps (observer
// --check, then chosen tests of each package) and reports each result on
// the console, which the host reads into one table.
package vmtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// Kernel is one kernel of the matrix: a Debian package, an image or a
// meta-package that depends on one (linux-image-amd64 is Debian 12's 6.1,
// whatever its ABI number today).
type Kernel struct {
	Name    string
	Package string
	// Suite is the Debian release to take it from, when not the host's
	// own (the host's apt is left as it is: a list of its own, in the
	// cache).
	Suite string
	// Skip names steps of the plan not run on this kernel: what other
	// kernels of the matrix already prove, said beside each.
	Skip []string
}

// Matrix is the kernels make test-kernels boots: Debian 12's own (6.1), its
// 6.12, and Debian 11's 5.10, where the probes take the portable way.
var Matrix = []Kernel{
	{Name: "6.1 (Debian 12)", Package: "linux-image-amd64"},
	// The portable way forced on a kernel whose own way is the fast one
	// is held on 6.1 here and on 6.18 in make test, either side of 6.12;
	// it took 146 s of this guest's 8 minutes under TCG.
	{Name: "6.12 (Debian 12)", Package: "linux-image-6.12-amd64", Skip: []string{"portable way"}},
	{Name: "5.10 (Debian 11)", Package: "linux-image-amd64", Suite: "bullseye"},
}

// Image is a kernel fetched and unpacked: its vmlinuz and modules.
type Image struct {
	Kernel
	Image   string // the package unpacked: linux-image-6.1.0-56-amd64
	Version string // its package version
	Release string // uname -r
	Root    string // where it is unpacked
	Vmlinuz string
}

// Modules is where the image's modules are.
func (im Image) Modules() string { return filepath.Join(im.Root, "lib", "modules", im.Release) }

var imagePackage = regexp.MustCompile(`^linux-image-[0-9][^ ]*$`)

// Fetch downloads the kernel's image package with apt-get download (a
// meta-package is resolved to the image it depends on), unpacks it under
// cache with dpkg-deb, and lists its modules' dependencies with depmod.
// An image already unpacked there is used as it is.
func Fetch(ctx context.Context, k Kernel, cache string) (Image, error) {
	// A meta-package depends on the image; an image on no other. An
	// image already unpacked is taken as it is.
	pkg := k.Package
	apt, err := aptFor(ctx, cache, k.Suite)
	if err != nil {
		return Image{}, err
	}
	if unpacked, _ := filepath.Glob(filepath.Join(cache, pkg, "boot", "vmlinuz-*")); len(unpacked) != 1 || !imagePackage.MatchString(pkg) {
		out, err := command(ctx, "", "apt-cache", append(apt, "depends", "--important", pkg)...)
		if err != nil {
			return Image{}, fmt.Errorf("resolving %s: %w (run apt-get update)", pkg, err)
		}
		if dep := dependsOnImage(out); dep != "" {
			pkg = dep
		}
	}
	im := Image{Kernel: k, Image: pkg, Root: filepath.Join(cache, pkg)}
	vmlinuz, _ := filepath.Glob(filepath.Join(im.Root, "boot", "vmlinuz-*"))
	if len(vmlinuz) != 1 {
		if err := os.MkdirAll(cache, 0o755); err != nil {
			return Image{}, err
		}
		if _, err := command(ctx, cache, "apt-get", append(apt, "download", pkg)...); err != nil {
			return Image{}, fmt.Errorf("downloading %s: %w", pkg, err)
		}
		debs, _ := filepath.Glob(filepath.Join(cache, pkg+"_*.deb"))
		if len(debs) == 0 {
			return Image{}, fmt.Errorf("apt-get download %s left no .deb in %s", pkg, cache)
		}
		deb := debs[len(debs)-1]
		if _, err := command(ctx, "", "dpkg-deb", "-x", deb, im.Root); err != nil {
			return Image{}, fmt.Errorf("unpacking %s: %w", deb, err)
		}
		// pkg_VERSION_arch.deb, with the epoch's colon as %3a.
		version := strings.ReplaceAll(strings.Split(filepath.Base(deb), "_")[1], "%3a", ":")
		if err := os.WriteFile(filepath.Join(im.Root, versionFile), []byte(version), 0o644); err != nil {
			return Image{}, err
		}
		for _, d := range debs {
			os.Remove(d)
		}
		vmlinuz, _ = filepath.Glob(filepath.Join(im.Root, "boot", "vmlinuz-*"))
		if len(vmlinuz) != 1 {
			return Image{}, fmt.Errorf("%s holds %d vmlinuz, want one", pkg, len(vmlinuz))
		}
	}
	im.Vmlinuz = vmlinuz[0]
	im.Release = strings.TrimPrefix(filepath.Base(im.Vmlinuz), "vmlinuz-")
	if b, err := os.ReadFile(filepath.Join(im.Root, versionFile)); err == nil {
		im.Version = strings.TrimSpace(string(b))
	}
	if _, err := os.Stat(filepath.Join(im.Modules(), "modules.dep")); err != nil {
		if _, err := command(ctx, "", "depmod", "-b", im.Root, im.Release); err != nil {
			return Image{}, fmt.Errorf("listing %s's modules: %w (install kmod)", pkg, err)
		}
	}
	return im, nil
}

// aptFor returns the options that point apt at the suite's archive: a
// sources list and package lists of its own under cache, fetched once.
// None for the host's own suite.
func aptFor(ctx context.Context, cache, suite string) ([]string, error) {
	if suite == "" {
		return nil, nil
	}
	dir, _ := filepath.Abs(filepath.Join(cache, "apt-"+suite))
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + filepath.Join(dir, "sources.list"), "-o", "Dir::Etc::SourceParts=/dev/null",
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"), "-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
	}
	if lists, _ := filepath.Glob(filepath.Join(dir, "lists", "*Packages*")); len(lists) > 0 {
		return opts, nil
	}
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	src := fmt.Sprintf("deb http://deb.debian.org/debian %s main\n", suite)
	if err := os.WriteFile(filepath.Join(dir, "sources.list"), []byte(src), 0o644); err != nil {
		return nil, err
	}
	if _, err := command(ctx, "", "apt-get", append(opts, "update")...); err != nil {
		return nil, fmt.Errorf("fetching Debian %s's package lists: %w", suite, err)
	}
	return opts, nil
}

// versionFile keeps, beside an unpacked image, its package's version.
const versionFile = ".version"

// dependsOnImage reads apt-cache depends's output for the image package.
func dependsOnImage(out string) string {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		dep, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Depends: ")
		if ok && imagePackage.MatchString(dep) {
			return dep
		}
	}
	return ""
}

// ModuleOrder lists the module files (relative to Modules()) to load for
// the named modules, each after its dependencies, once; a module built into
// the kernel needs none.
func ModuleOrder(modulesDep, modulesBuiltin string, names []string) ([]string, error) {
	deps := map[string][]string{} // module file → the files it depends on
	byName := map[string]string{} // module name → its file
	sc := bufio.NewScanner(strings.NewReader(modulesDep))
	for sc.Scan() {
		file, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[file] = strings.Fields(rest)
		byName[moduleName(file)] = file
	}
	builtin := map[string]bool{}
	for line := range strings.Lines(modulesBuiltin) {
		builtin[moduleName(strings.TrimSpace(line))] = true
	}
	var order []string
	seen := map[string]bool{}
	var visit func(file string, depth int) error
	visit = func(file string, depth int) error {
		if seen[file] {
			return nil
		}
		if depth > 32 {
			return fmt.Errorf("%s: dependencies loop", file)
		}
		seen[file] = true
		for _, d := range deps[file] {
			if err := visit(d, depth+1); err != nil {
				return err
			}
		}
		order = append(order, file)
		return nil
	}
	for _, name := range names {
		name = strings.ReplaceAll(name, "-", "_")
		file, ok := byName[name]
		switch {
		case ok:
			if err := visit(file, 0); err != nil {
				return nil, err
			}
		case builtin[name]:
		default:
			return nil, fmt.Errorf("the kernel has no module %s, built in or loadable", name)
		}
	}
	return order, nil
}

// moduleName is a module's name from its file: kernel/drivers/x/virtio-blk.ko.xz
// is virtio_blk.
func moduleName(file string) string {
	base := filepath.Base(file)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// command runs a program and returns its standard output; the error holds
// its standard error.
func command(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
