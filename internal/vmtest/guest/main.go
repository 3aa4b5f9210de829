// Command guest is the init of thrashscope's test VMs (package vmtest): as
// PID 1 of an initramfs it mounts the kernel's file systems (cgroup2 alone,
// so the guest is pure cgroup v2), loads the modules of the plan, makes the
// virtio disk swap, enables the memory and io controllers for the root's
// children, brings up loopback, runs each step of the plan and reports it
// on the console, and powers the machine off. It never exits: PID 1's exit
// is a kernel panic.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/vmtest"
)

func main() {
	defer powerOff()
	rep := vmtest.Report{Kind: "boot"}
	rep.Problems = setUp()
	console := reportsTo()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		rep.Uname = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource"); err == nil {
		rep.Clock = strings.TrimSpace(string(b))
	}
	plan, err := readPlan()
	if err != nil {
		rep.Problems = append(rep.Problems, err.Error())
		fmt.Fprintln(console, rep.Line())
		return
	}
	rep.Problems = append(rep.Problems, prepare(plan)...)
	fmt.Fprintln(console, rep.Line())
	for _, st := range plan.Steps {
		fmt.Fprintln(console, run(st, plan.Env).Line())
	}
	fmt.Fprintln(console, vmtest.Report{Kind: "done", Pass: true}.Line())
}

// setUp mounts what a test needs; each failure is reported, not fatal.
func setUp() []string {
	var problems []string
	for _, m := range []struct{ source, target, fstype, data string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", ""},
		{"tmpfs", "/tmp", "tmpfs", "mode=1777"},
		{"tmpfs", "/dev/shm", "tmpfs", "mode=1777"},
		{"tmpfs", "/run", "tmpfs", "mode=0755"},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", "nsdelegate"},
		{"tracefs", "/sys/kernel/tracing", "tracefs", ""},
		{"debugfs", "/sys/kernel/debug", "debugfs", ""},
		{"bpf", "/sys/fs/bpf", "bpf", ""},
	} {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if err := unix.Mount(m.source, m.target, m.fstype, 0, m.data); err != nil {
			problems = append(problems, fmt.Sprintf("mounting %s on %s: %v", m.fstype, m.target, err))
		}
	}
	if err := exec.Command("/bin/busybox", "--install", "-s", "/bin").Run(); err != nil {
		problems = append(problems, "busybox --install: "+err.Error())
	}
	return problems
}

// reportsTo is where the reports go: the console, for the host to echo as
// they come, and the second serial port, which carries nothing else. The
// host reads them from the latter: on the console a kernel message can
// land in the middle of a long report's line and make it unreadable.
func reportsTo() io.Writer {
	port, err := os.OpenFile(vmtest.GuestReportPort, os.O_WRONLY|unix.O_NOCTTY, 0)
	if err != nil {
		fmt.Printf("no report port (%v): the host reads the reports off the console\n", err)
		return os.Stdout
	}
	// Raw: no \n to \r\n, nothing held back.
	if t, err := unix.IoctlGetTermios(int(port.Fd()), unix.TCGETS); err == nil {
		t.Oflag &^= unix.OPOST
		_ = unix.IoctlSetTermios(int(port.Fd()), unix.TCSETS, t)
	}
	return io.MultiWriter(os.Stdout, port)
}

func readPlan() (vmtest.Plan, error) {
	var p vmtest.Plan
	b, err := os.ReadFile(vmtest.GuestPlan)
	if err != nil {
		return p, err
	}
	return p, json.Unmarshal(b, &p)
}

// prepare loads the modules, makes the swap, enables the controllers and
// brings up loopback.
func prepare(plan vmtest.Plan) []string {
	var problems []string
	if err := creditEntropy(plan.Seed); err != nil {
		problems = append(problems, "seeding the random pool: "+err.Error())
	}
	for _, m := range plan.Modules {
		if err := loadModule(m); err != nil {
			problems = append(problems, fmt.Sprintf("loading %s: %v", filepath.Base(m), err))
		}
	}
	if plan.SwapDevice != "" {
		if err := swap(plan.SwapDevice); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if plan.DataDevice != "" {
		if err := mountData(plan.DataDevice, "/var/tmp"); err != nil {
			problems = append(problems, err.Error())
		}
	}
	// The root cgroup may enable controllers with processes in it; the
	// tests make their cgroups beneath it, as an observer started by hand
	// on a host without systemd would.
	for _, c := range []string{"memory", "io", "cpu", "pids"} {
		if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+"+c), 0); err != nil {
			problems = append(problems, fmt.Sprintf("enabling %s for the root's children: %v", c, err))
		}
	}
	if err := loopbackUp(); err != nil {
		problems = append(problems, "bringing up lo: "+err.Error())
	}
	return problems
}

// creditEntropy adds the host's seed to the random pool and credits it
// (RNDADDENTROPY), so getrandom does not block.
func creditEntropy(seed []byte) error {
	if len(seed) == 0 {
		return nil
	}
	f, err := os.OpenFile("/dev/random", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(seed))
	binary.NativeEndian.PutUint32(info[0:], uint32(8*len(seed)))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(seed)))
	copy(info[8:], seed)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
		return e
	}
	if _, err := unix.Getrandom(make([]byte, 16), unix.GRND_NONBLOCK); err != nil {
		return fmt.Errorf("the pool is not ready after the credit: %w", err)
	}
	return nil
}

// loadModule loads a module file; a compressed one is decompressed by the
// kernel (CONFIG_MODULE_DECOMPRESS).
func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	flags := 0
	if strings.HasSuffix(path, ".xz") || strings.HasSuffix(path, ".zst") || strings.HasSuffix(path, ".gz") {
		flags = unix.MODULE_INIT_COMPRESSED_FILE
	}
	if err := unix.FinitModule(int(f.Fd()), "", flags); err != nil && err != unix.EEXIST {
		return err
	}
	return nil
}

// waitFor waits for a disk to appear.
func waitFor(dev string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(dev); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no disk %s after 10 s", dev)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mountData mounts the ext4 data disk at dir, for every user.
func mountData(dev, dir string) error {
	if err := waitFor(dev); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dev, dir, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mounting %s (ext4) on %s: %v", dev, dir, err)
	}
	return os.Chmod(dir, 0o1777)
}

// swap makes dev swap and turns it on, waiting for the disk to appear.
func swap(dev string) error {
	if err := waitFor(dev); err != nil {
		return err
	}
	for _, args := range [][]string{{"mkswap", dev}, {"swapon", dev}} {
		if out, err := exec.Command("/bin/busybox", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	ifr.SetUint16(unix.IFF_UP | unix.IFF_LOOPBACK | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// maxOutput is how much of a step's output its report keeps: the end.
const maxOutput = 16 << 10

// run runs one step, its output on the console as it comes, and reports it.
func run(st vmtest.Step, env []string) vmtest.Report {
	rep := vmtest.Report{Kind: "step", Step: st.Name}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(st.TimeoutSeconds)*time.Second)
	defer cancel()
	args := st.Args
	if st.GoTest {
		args = append([]string{"-test.v", "-test.count=1", "-test.timeout=" + (time.Duration(st.TimeoutSeconds) * time.Second).String()}, args...)
	}
	cmd := exec.CommandContext(ctx, st.Path, args...)
	cmd.Dir, cmd.Env = st.Dir, env
	cmd.WaitDelay = 5 * time.Second
	var all bytes.Buffer
	out := &lineWriter{prefix: "  | " + st.Name + ": ", w: os.Stdout}
	cmd.Stdout = io.MultiWriter(out, &all)
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	err := cmd.Run()
	out.flush()
	rep.Seconds = time.Since(start).Round(100 * time.Millisecond).Seconds()
	rep.Pass = err == nil
	text := all.String()
	if st.GoTest {
		rep.Tests = vmtest.GoTests(text)
		rep.Figures = vmtest.Figures(text)
	}
	if ctx.Err() != nil {
		text += fmt.Sprintf("\n(killed after its %d s)", st.TimeoutSeconds)
	} else if err != nil {
		text += "\n(" + err.Error() + ")"
	}
	if !st.GoTest || !rep.Pass {
		rep.Output = tail(text, maxOutput)
	}
	return rep
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// lineWriter writes each line with a prefix, so a step's output is told
// apart from the kernel's on the console.
type lineWriter struct {
	mu     sync.Mutex
	prefix string
	w      io.Writer
	buf    []byte
}

func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(l.w, "%s%s\n", l.prefix, l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	return len(b), nil
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		fmt.Fprintf(l.w, "%s%s\n", l.prefix, l.buf)
		l.buf = nil
	}
}

// powerOff ends the machine: the host's qemu exits with it.
func powerOff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {} // PID 1 must not return
}
