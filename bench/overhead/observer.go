package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/bench/internal/benchproc"
)

// observerProcess is one running bin/observer, started for one observed
// phase so its attach cost stays outside every measured window.
type observerProcess struct {
	cmd    *exec.Cmd
	addr   string
	stderr *tailBuffer
	exited chan struct{} // closed once Wait returns
	err    error         // Wait's error, valid after exited
}

// observerArgs are the flags the observer is measured with: its programs
// in the given way (auto, fast or portable).
func observerArgs(addr, way string) []string {
	return []string{
		"--web.listen-address=" + addr,
		"--sample.interval=1s",
		"--probes=bpf",
		"--probes.way=" + way,
	}
}

// startObserver runs bin, waits until GET /readyz answers 200, then settle
// longer so start-up work has died down. On failure the process is gone and
// the error carries its stderr.
func startObserver(ctx context.Context, bin, way string, readyTimeout, settle time.Duration, logger *slog.Logger) (*observerProcess, error) {
	addr, err := benchproc.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	o := &observerProcess{
		addr:   addr,
		stderr: newTailBuffer(16 << 10),
		exited: make(chan struct{}),
	}
	o.cmd = exec.Command(bin, observerArgs(addr, way)...)
	o.cmd.Stdout = o.stderr
	o.cmd.Stderr = o.stderr
	// A BPF observer left behind would skew every later measurement.
	o.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := o.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting observer %s: %w", bin, err)
	}
	go func() {
		o.err = o.cmd.Wait()
		close(o.exited)
	}()
	logger.Debug("observer started", "pid", o.pid(), "addr", addr)

	if err := o.waitReady(ctx, readyTimeout); err != nil {
		o.kill()
		return nil, err
	}
	select {
	case <-time.After(settle):
	case <-o.exited:
		return nil, o.exitError("exited right after becoming ready")
	case <-ctx.Done():
		o.kill()
		return nil, ctx.Err()
	}
	return o, nil
}

func (o *observerProcess) pid() int { return o.cmd.Process.Pid }

func (o *observerProcess) waitReady(ctx context.Context, timeout time.Duration) error {
	url := "http://" + o.addr + "/readyz"
	client := &http.Client{Timeout: time.Second}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if ready(ctx, client, url) {
			return nil
		}
		select {
		case <-o.exited:
			return o.exitError("exited before it was ready")
		case <-deadline.C:
			return fmt.Errorf("observer not ready: GET %s did not answer 200 within %v; its output:\n%s", url, timeout, o.stderr)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func ready(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// alive reports an error if the observer has exited, e.g. mid-window.
func (o *observerProcess) alive() error {
	select {
	case <-o.exited:
		return o.exitError("exited while being measured")
	default:
		return nil
	}
}

func (o *observerProcess) exitError(what string) error {
	return fmt.Errorf("observer %s (%v); its output:\n%s", what, o.err, o.stderr)
}

// stop sends SIGTERM and waits for the exit, killing after timeout. An
// unclean exit is logged, not returned: the measurement is already taken.
func (o *observerProcess) stop(timeout time.Duration, logger *slog.Logger) error {
	select {
	case <-o.exited:
		return o.exitError("had already exited when asked to stop")
	default:
	}
	if err := o.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping observer: %w", err)
	}
	select {
	case <-o.exited:
	case <-time.After(timeout):
		o.kill()
		return fmt.Errorf("observer did not exit within %v of SIGTERM and was killed; its output:\n%s", timeout, o.stderr)
	}
	if o.err != nil && !terminatedBy(o.err, syscall.SIGTERM) {
		logger.Warn("observer exited uncleanly after SIGTERM", "err", o.err, "output", o.stderr.String())
	}
	return nil
}

func (o *observerProcess) kill() {
	_ = o.cmd.Process.Kill()
	<-o.exited
}

// terminatedBy tells a process that died of sig (no handler, e.g. a script
// stand-in) from one that failed.
func terminatedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// tailBuffer keeps the last max bytes written to it: enough of the
// observer's log to explain a failure, bounded however chatty it is.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimRight(string(t.buf), "\n")
	if s == "" {
		return "  (no output)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
