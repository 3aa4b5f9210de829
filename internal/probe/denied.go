package probe

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A permission error from bpf() or perf_event_open has two causes that
// need different fixes: a missing capability, or a seccomp filter (a
// container runtime's default profile) that refuses the system call
// whatever the capabilities. Without CAP_SYS_RESOURCE the first bpf()
// that fails is cilium/ebpf's memlock probe, whose message names memlock,
// not the cause. deniedBy tells them apart: with the capability granted,
// a system call made with an argument the kernel itself refuses with
// EINVAL or E2BIG comes back EPERM only if something in front of the
// kernel stopped it.

// Capability numbers (linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// processStatus reads the Seccomp mode and effective capabilities of this
// process from /proc/self/status.
func processStatus() (seccomp int, capEff uint64, err error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, _ := strings.Cut(s.Text(), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "Seccomp":
			seccomp, _ = strconv.Atoi(v)
		case "CapEff":
			capEff, _ = strconv.ParseUint(v, 16, 64)
		}
	}
	return seccomp, capEff, s.Err()
}

func hasCap(eff uint64, c uint) bool { return eff&(1<<c) != 0 }

// bpfDenied reports whether bpf() itself is refused: BPF_MAP_CREATE with
// no map type is EINVAL from the kernel, EPERM from a filter in front of
// it (or from the kernel, without CAP_BPF).
func bpfDenied() bool {
	var attr [72]byte // union bpf_attr for BPF_MAP_CREATE, all zero
	_, _, errno := unix.Syscall(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	return errno == unix.EPERM || errno == unix.EACCES || errno == unix.ENOSYS
}

// perfDenied reports whether perf_event_open itself is refused: an
// attribute of size 1 is E2BIG or EINVAL from the kernel.
func perfDenied() bool {
	attr := unix.PerfEventAttr{Size: 1}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err == nil {
		unix.Close(fd)
		return false
	}
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS)
}

// errSeccomp is a system call refused in front of the kernel.
var errSeccomp = errors.New("refused in front of the kernel, by a seccomp filter or a security module")

// deniedBy returns why bpf() or perf_event_open is refused, or nil if
// neither is refused for a reason it can name. A seccomp filter is named
// only when the capabilities the call needs are granted, so a missing
// capability is never blamed on it.
func deniedBy() error {
	seccomp, eff, err := processStatus()
	if err != nil {
		return nil
	}
	var calls []string
	if bpfDenied() && (hasCap(eff, capBPF) || hasCap(eff, capSysAdmin)) {
		calls = append(calls, "bpf")
	}
	if perfDenied() && (hasCap(eff, capPerfmon) || hasCap(eff, capSysAdmin)) {
		calls = append(calls, "perf_event_open")
	}
	if len(calls) == 0 {
		return nil
	}
	where := "although CAP_BPF and CAP_PERFMON are granted"
	if seccomp == 2 {
		where = "Seccomp: 2 in /proc/self/status, " + where
	}
	return fmt.Errorf("%s refused (%s): %w; a container runtime's default seccomp profile may allow them only with CAP_SYS_ADMIN (Podman's does): "+
		"run the observer under a profile that allows bpf and perf_event_open (Kubernetes: seccompProfile Localhost; Podman, Docker: --security-opt seccomp=<profile>), "+
		"or use --probes=procfs", strings.Join(calls, " and "), where, errSeccomp)
}
