package probe

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// TestSeccompDenialIsNamed: a process whose seccomp filter refuses bpf()
// and perf_event_open, as a container runtime's default profile does
// without CAP_SYS_ADMIN, is told so, with the fix, and not sent after
// memlock or capabilities it has. Without a filter nothing is blamed on
// one.
func TestSeccompDenialIsNamed(t *testing.T) {
	testenv.RequirePrivileged(t)
	if err := deniedBy(); err != nil {
		t.Fatalf("with no seccomp filter, deniedBy = %v", err)
	}
	// The last also lacks CAP_SYS_RESOURCE, as in a least-privilege
	// container: the error must not send one after memlock either.
	for _, calls := range []string{"bpf", "perf_event_open", "bpf,perf_event_open", "bpf,perf_event_open,-CAP_SYS_RESOURCE"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$", calls)
		cmd.Env = append(os.Environ(), childEnv+"=seccomp")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: child: %v: %s", calls, err, out)
		}
		got := string(out)
		t.Logf("%s refused: %s", calls, strings.TrimSpace(got))
		for _, call := range strings.Split(calls, ",") {
			if strings.HasPrefix(call, "-") {
				if strings.Contains(got, "memlock") {
					t.Errorf("%s: the error still sends one after memlock: %s", calls, got)
				}
				continue
			}
			if !strings.Contains(got, call+" refused") && !strings.Contains(got, call+" and ") && !strings.Contains(got, " and "+call+" refused") {
				t.Errorf("%s refused: the error does not name %s: %s", calls, call, got)
			}
		}
		if !strings.Contains(got, "seccomp") || !strings.Contains(got, "--security-opt seccomp=") || !strings.Contains(got, "--probes=procfs") {
			t.Errorf("%s refused: the error names neither seccomp nor the fixes: %s", calls, got)
		}
	}
}

// seccompChild refuses the system calls named in its last argument with
// EPERM on every thread, as Podman's default profile does, then loads the
// probes and prints the error.
func seccompChild() error {
	runtime.LockOSThread()
	var nrs []uint32
	for _, call := range strings.Split(os.Args[len(os.Args)-1], ",") {
		if call == "-CAP_SYS_RESOURCE" {
			if err := dropCapability(unix.CAP_SYS_RESOURCE); err != nil {
				return err
			}
			continue
		}
		nrs = append(nrs, map[string]uint32{"bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN}[call])
	}
	// seccomp_data.nr is at offset 0; each refused call returns EPERM.
	prog := []unix.SockFilter{{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}}
	for i, nr := range nrs {
		prog = append(prog, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: nr,
			Jt: uint8(len(nrs) - i)})
	}
	prog = append(prog,
		unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
		unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)})
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("installing the seccomp filter: %w", errno)
	}
	p, err := Load(Options{})
	if err != nil {
		fmt.Println(err)
		return nil
	}
	// Loaded: the probes that need what is refused are down, each saying
	// why.
	defer p.Close()
	var down []string
	for _, st := range p.Status() {
		if st.Err != nil {
			down = append(down, st.Name+": "+st.Err.Error())
		}
	}
	if len(down) == 0 {
		return fmt.Errorf("every probe is up with %s refused", os.Args[len(os.Args)-1])
	}
	fmt.Println(strings.Join(down, "; "))
	return nil
}

// dropCapability takes c out of every thread's effective and permitted
// sets (the Go runtime's threads too: capset is per thread, so each
// locked thread does it; the probes' system calls run on this one).
func dropCapability(c uint) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[c/32].Effective &^= 1 << (c % 32)
	data[c/32].Permitted &^= 1 << (c % 32)
	return unix.Capset(&hdr, &data[0])
}
