package benchproc

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestStatusKB(t *testing.T) {
	status := "Name:\tobserver\nVmPeak:\t  1000 kB\nVmHWM:\t   31256 kB\nVmRSS:\t  30000 kB\n"
	if got := StatusKB([]byte(status), "VmHWM:"); got != 31256<<10 {
		t.Errorf("VmHWM = %d, want %d", got, 31256<<10)
	}
	if got := StatusKB([]byte(status), "VmSwap:"); got != 0 {
		t.Errorf("missing VmSwap = %d, want 0", got)
	}
}

func TestWaitReady(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if err := WaitReady(context.Background(), srv.URL, 5*time.Second); err != nil || calls.Load() != 3 {
		t.Errorf("ready after %d calls: %v, want after 3", calls.Load(), err)
	}
	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer never.Close()
	if err := WaitReady(context.Background(), never.URL, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "within 300ms") {
		t.Errorf("a server never ready: %v", err)
	}
}

func TestStopKillsAfterGrace(t *testing.T) {
	cmd := exec.Command("sh", "-c", `trap "" TERM; exec sleep 30`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The shell has set its trap once it has exec'd sleep (an ignored
	// signal stays ignored across exec).
	comm := fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(comm); strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the shell did not exec sleep within 5s")
		}
	}
	t0 := time.Now()
	Stop(cmd, 300*time.Millisecond)
	if d := time.Since(t0); d < 300*time.Millisecond || d > 5*time.Second || cmd.ProcessState == nil {
		t.Errorf("stopped after %s (%v), want killed after the 300ms grace", d, cmd.ProcessState)
	}
}

func TestFreeLoopbackAddr(t *testing.T) {
	addr, err := FreeLoopbackAddr()
	if err != nil || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("%q %v", addr, err)
	}
}
