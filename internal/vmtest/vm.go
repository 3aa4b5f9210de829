package vmtest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Guest is what a kernel's initramfs holds besides the kernel's modules.
type Guest struct {
	// Init is the guest's init (package vmtest/guest), built static.
	Init string
	// Busybox is a static busybox: a shell and the commands tests run.
	Busybox string
	// Binaries go into GuestBin, by name: observer, loadgen, the test
	// binaries.
	Binaries map[string]string
	// Src are directories of the repository a test reads (its package's
	// testdata), by their path in it; they go under GuestSrc.
	Src map[string]string
	Env []string
	// Steps run in order; a step's Dir is relative to GuestSrc.
	Steps []Step
}

// guestModules make the virtio disks (their PCI transport and the block
// driver), the ext4 on the data disk (and the checksum its metadata uses,
// which the kernel would ask a modprobe the guest has not for) and zram
// (one device, for the settings step's zram swap); some are built in.
var guestModules = []string{"virtio_pci", "virtio_blk", "crc32c_generic", "ext4", "zram"}

// The virtio disks as the guest sees them: the swap, then the data disk.
const (
	SwapDevice = "/dev/vda"
	DataDevice = "/dev/vdb"
)

// WriteInitramfs writes the guest's initramfs for the kernel image.
func (g Guest) WriteInitramfs(w io.Writer, im Image) error {
	dep, err := os.ReadFile(filepath.Join(im.Modules(), "modules.dep"))
	if err != nil {
		return err
	}
	builtin, _ := os.ReadFile(filepath.Join(im.Modules(), "modules.builtin"))
	order, err := ModuleOrder(string(dep), string(builtin), guestModules)
	if err != nil {
		return fmt.Errorf("%s: %w", im.Image, err)
	}
	plan := Plan{SwapDevice: SwapDevice, DataDevice: DataDevice, Env: g.Env, Seed: make([]byte, 64)}
	if _, err := rand.Read(plan.Seed); err != nil {
		return err
	}
	var entries []Entry
	for _, dir := range []string{"proc", "sys", "dev", "tmp", "run", "root", "etc"} {
		entries = append(entries, Entry{Name: dir, Mode: fs.ModeDir | 0o755})
	}
	entries = append(entries, Entry{Name: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\n")})
	files, err := g.files(im, order, &plan)
	if err != nil {
		return err
	}
	entries = append(entries, files...)
	for _, st := range g.Steps {
		st.Dir = path.Join(GuestSrc, st.Dir)
		entries = append(entries, Entry{Name: strings.TrimPrefix(st.Dir, "/"), Mode: fs.ModeDir | 0o755})
		plan.Steps = append(plan.Steps, st)
	}
	b, err := json.MarshalIndent(plan, "", "  ")
	if err != nil {
		return err
	}
	entries = append(entries, Entry{Name: strings.TrimPrefix(GuestPlan, "/"), Mode: 0o644, Data: b})
	return writeCPIO(w, entries)
}

// files are the host files the guest gets: its init, busybox, the kernel's
// modules in order (each also in the plan), the binaries and the sources.
func (g Guest) files(im Image, order []string, plan *Plan) ([]Entry, error) {
	var entries []Entry
	add := func(name, host string) error {
		fi, err := os.Stat(host)
		if err != nil {
			return err
		}
		entries = append(entries, Entry{Name: name, Mode: fi.Mode().Perm(), Size: fi.Size(),
			Open: func() (io.ReadCloser, error) { return os.Open(host) }})
		return nil
	}
	if err := add("init", g.Init); err != nil {
		return nil, err
	}
	if err := add("bin/busybox", g.Busybox); err != nil {
		return nil, err
	}
	for _, m := range order {
		guestPath := path.Join("lib/modules", im.Release, m)
		if err := add(guestPath, filepath.Join(im.Modules(), m)); err != nil {
			return nil, err
		}
		plan.Modules = append(plan.Modules, "/"+guestPath)
	}
	for name, host := range g.Binaries {
		if err := add(path.Join(strings.TrimPrefix(GuestBin, "/"), name), host); err != nil {
			return nil, err
		}
	}
	for rel, host := range g.Src {
		err := filepath.WalkDir(host, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			sub, _ := filepath.Rel(host, p)
			return add(path.Join(strings.TrimPrefix(GuestSrc, "/"), rel, filepath.ToSlash(sub)), p)
		})
		if err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// Machine is how a guest is run.
type Machine struct {
	// Accel is tcg or kvm.
	Accel  string
	CPUs   int
	Memory string // qemu's -m: 3G
	// SwapBytes and DataBytes are the sizes of the swap and data disks.
	SwapBytes, DataBytes int64
	// LogLevel is the kernel's console log level: 4 shows warnings and
	// worse, 7 everything (a lockup's stack).
	LogLevel int
	// CPUTime, when set, receives the CPU time qemu itself used (user and
	// system, all its threads), once it has exited.
	CPUTime *time.Duration
	// Extract copies directories of the data disk (as the guest mounts it
	// at /var/tmp: "/compare" is its /var/tmp/compare) to host
	// directories, once the guest powered off.
	Extract map[string]string
}

// Boot runs the kernel with the initramfs until the guest powers off or ctx
// is done, the console written to console, and returns the guest's
// reports. The disks are sparse files in dir, removed after: the swap, and
// the data disk made ext4.
func (m Machine) Boot(ctx context.Context, im Image, initramfs, dir string, console io.Writer) ([]Report, error) {
	swap, data, err := m.disks(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer os.Remove(swap)
	defer os.Remove(data)
	reportFile, err := sparse(dir, "reports-*.txt", 0)
	if err != nil {
		return nil, err
	}
	defer os.Remove(reportFile)
	args := m.qemuArgs(im, initramfs, swap, data, reportFile)
	var out strings.Builder
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	cmd.Stdout = io.MultiWriter(console, &out)
	cmd.Stderr = cmd.Stdout
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	if m.CPUTime != nil && cmd.ProcessState != nil {
		*m.CPUTime = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	reports := readReports(out.String(), reportFile)
	for from, to := range m.Extract {
		if xerr := extract(ctx, data, from, to); xerr != nil {
			err = errors.Join(err, xerr)
		}
	}
	switch {
	case ctx.Err() != nil:
		return reports, fmt.Errorf("qemu: the guest did not power off in time: %w", ctx.Err())
	case err != nil:
		return reports, fmt.Errorf("qemu: %w", err)
	case len(reports) == 0 || reports[len(reports)-1].Kind != "done":
		return reports, errors.New("the guest ended before its last step: see the console log")
	}
	return reports, nil
}

// qemuArgs are qemu's arguments for the guest: the console on stdio, the
// reports on a serial port of their own, written to reportFile.
func (m Machine) qemuArgs(im Image, initramfs, swap, data, reportFile string) []string {
	accel, cpu := m.Accel, "max"
	switch m.Accel {
	case "kvm":
		cpu = "host"
	case "tcg":
		// One host thread runs every vCPU. With a thread each (MTTCG),
		// the kernel patching its own code (a tracepoint's static key,
		// as attaching sched_switch does) raced another vCPU still
		// running the old translation: "Oops: int3" in __schedule on
		// 6.12, soft lockups on 6.1.
		accel = "tcg,thread=single"
	}
	args := []string{
		"-accel", accel, "-cpu", cpu, "-smp", fmt.Sprint(m.CPUs), "-m", m.Memory,
		"-kernel", im.Vmlinuz, "-initrd", initramfs,
		// cgroup_no_v1=all: pure cgroup v2, as the hosts SREs run.
		// tsc=reliable: TCG's vCPUs read one host-driven TSC, which the
		// kernel would mark unstable (unsynchronised), leaving PSI's
		// clock (sched_clock) and BPF's (the clocksource) apart.
		// oops=panic: a kernel that oopsed is no test bed; with panic=-1
		// and -no-reboot qemu exits at once, where a 6.12 guest that
		// oopsed under TCG ran on in soft lockups until the timeout.
		"-append", fmt.Sprintf("console=ttyS0 panic=-1 oops=panic loglevel=%d cgroup_no_v1=all tsc=reliable", cmp.Or(m.LogLevel, 4)),
		"-drive", "file=" + swap + ",format=raw,if=virtio,cache=unsafe",
		"-drive", "file=" + data + ",format=raw,if=virtio,cache=unsafe",
		"-display", "none", "-vga", "none", "-serial", "stdio", "-serial", "file:" + reportFile, "-monitor", "none",
		"-nic", "none", "-no-reboot",
	}
	return args
}

// readReports are the guest's reports: from the report port's copy, whole
// where the console's may have a kernel message in the middle of a line;
// from the console when the port carried none.
func readReports(console, reportFile string) []Report {
	if b, err := os.ReadFile(reportFile); err == nil {
		if fromPort := ParseReports(bytes.NewReader(b)); len(fromPort) > 0 {
			return fromPort
		}
	}
	return ParseReports(strings.NewReader(console))
}

// disks makes the guest's sparse disks in dir: the swap, and the data disk
// made ext4. On an error it leaves neither.
func (m Machine) disks(ctx context.Context, dir string) (swap, data string, err error) {
	if swap, err = sparse(dir, "swap-*.img", m.SwapBytes); err != nil {
		return "", "", err
	}
	if data, err = sparse(dir, "data-*.img", cmp.Or(m.DataBytes, 1<<30)); err != nil {
		os.Remove(swap)
		return "", "", err
	}
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", data).CombinedOutput(); err != nil {
		os.Remove(swap)
		os.Remove(data)
		return "", "", fmt.Errorf("mkfs.ext4 for the data disk: %w: %s (install e2fsprogs)", err, out)
	}
	return swap, data, nil
}

// extract copies the directory from of the ext4 image data into the host
// directory to (debugfs's rdump makes to/<base of from>).
func extract(ctx context.Context, data, from, to string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "debugfs", "-R", "rdump "+from+" "+to, data).CombinedOutput()
	if err != nil || strings.Contains(string(out), "File not found") {
		return fmt.Errorf("copying %s out of the data disk: %v: %s (install e2fsprogs)", from, err, out)
	}
	return nil
}

// sparse makes a sparse file of size bytes in dir.
func sparse(dir, pattern string, size int64) (string, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
