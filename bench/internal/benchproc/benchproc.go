// Package benchproc holds what the benchmark programs share about the
// processes they start and measure: a free loopback port, waiting until a
// server answers, stopping it, and reading its /proc/<pid>/status.
package benchproc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// FreeLoopbackAddr asks the kernel for a free port on 127.0.0.1. Another
// process could take it before the server binds; the server then fails to
// start and says so.
func FreeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// WaitReady polls url every 100 ms until it answers 200, for at most
// timeout or until ctx is done.
func WaitReady(ctx context.Context, url string, timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", url, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %s", url, timeout)
		}
	}
}

// Stop sends cmd's process SIGTERM and waits for it; after grace it is
// killed.
func Stop(cmd *exec.Cmd, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// StatusKB is a "Field:  N kB" line of /proc/<pid>/status in bytes, or 0
// when the field is missing (VmSwap of a kernel thread) or malformed.
func StatusKB(b []byte, field string) uint64 {
	i := bytes.Index(b, []byte(field))
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+len(field):])
	if len(f) < 2 || string(f[1]) != "kB" {
		return 0
	}
	n, _ := strconv.ParseUint(string(f[0]), 10, 64)
	return n << 10
}
