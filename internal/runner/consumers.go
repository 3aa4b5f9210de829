// Supervision: each consumer process started in its own sub-cgroup with the
// consumer protocol's files, its messages read, its exit recorded, and the
// teardown (SIGTERM, then SIGKILL).

package runner

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/consumer"
	"github.com/thrashscope/thrashscope/internal/run"
)

// consumerGroups makes n sub-cgroups of cg, consumer-00 and on, and opens
// each one's cgroup.procs for its consumer to join through.
func consumerGroups(cg *cgroup.Cgroup, n int) ([]*os.File, []*cgroup.Cgroup, error) {
	joins := make([]*os.File, 0, n)
	var children []*cgroup.Cgroup
	for i := range n {
		ch, err := cg.Child(run.ConsumerName(i))
		var f *os.File
		if err == nil {
			f, err = ch.OpenProcs()
		}
		if err != nil {
			for _, f := range joins {
				f.Close()
			}
			return nil, nil, err
		}
		joins = append(joins, f)
		children = append(children, ch)
	}
	return joins, children, nil
}

// spawnAll starts each consumer spawnLead before its plan, until the plan
// is done or the run is cancelled.
func (r *execution) spawnAll(wg *sync.WaitGroup) {
	for i := range r.procs {
		if r.ctx.Err() != nil {
			return // a select with both ready picks either: not a consumer more
		}
		at := r.rec.Consumers[i].PlannedStart.Add(-spawnLead)
		t := time.NewTimer(time.Until(at))
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		// A wake long past its time is this process's own pause (stopped,
		// or starved of CPU), not a slow fork.
		woke := time.Since(at)
		if err := r.spawn(i, wg); err != nil {
			r.cfg.Logger.Error("starting a consumer failed; aborting the run", "run", r.cfg.ID, "consumer", i, "err", err)
			r.cancel(fmt.Errorf("starting consumer %d: %w", i, err))
			return
		}
		// Only a plan that left room for the lead can be missed: a fill run,
		// or a zero lead-in, starts its first consumers at once.
		planned := r.rec.Consumers[i].PlannedStart
		late := time.Since(planned)
		switch {
		case late <= 0 || planned.Sub(r.start) < spawnLead:
		case woke > spawnLead:
			r.cfg.Logger.Warn("a consumer was ready after its planned start: this process woke to start it late, stopped or starved of CPU", "run", r.cfg.ID, "consumer", i, "late", late, "woke_late", woke)
		default:
			r.cfg.Logger.Warn("a consumer was ready after its planned start; fork and exec are slow on this host", "run", r.cfg.ID, "consumer", i, "late", late, "lead", spawnLead)
		}
	}
}

// spawn starts consumer i and lets it go: it joins the cgroup at its start.
func (r *execution) spawn(i int, wg *sync.WaitGroup) error {
	c := r.rec.Consumers[i] // fixed fields only; no lock needed
	cc := r.consumerConfig(i, c.PlannedStart, c.PlannedEnd)
	r.shape.configure(r, &cc)
	cmd, repR, ctl, stderr, err := r.startConsumer(cc)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.procs[i] = cmd.Process
	r.rec.Consumers[i].PID = cmd.Process.Pid
	r.mu.Unlock()

	// Its levers before anything can reap it: the pid is its own until
	// the Wait below.
	leverErr := r.levers.attach(i, cmd.Process.Pid, ctl)
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.readMessages(i, repR)
		repR.Close()
		err := cmd.Wait()
		r.levers.detach(i)
		ctl.Close()
		r.exited(i, cmd.ProcessState, err, stderr.Last())
	}()
	return leverErr
}

// consumerConfig is consumer index's command line in this run: the run's
// shape, joining its sub-cgroup at start, ending at end (or its cycles).
func (r *execution) consumerConfig(index int, start, end time.Time) consumer.Config {
	return consumer.Config{
		Index:     index,
		Size:      r.cfg.Spec.SizeBytes,
		Writes:    r.cfg.Spec.WritesPerCycle,
		Sleep:     r.cfg.Spec.Sleep.D(),
		Start:     start,
		End:       end,
		Cycles:    r.cfg.Spec.Cycles,
		Backing:   r.cfg.Spec.Backing,
		FileDir:   r.cfg.FileDir,
		Fill:      r.cfg.Spec.Fill,
		ParentPID: os.Getpid(),
		Mode:      consumer.ModeCycles,
		Join:      true,
		CycleLog:  r.board != nil,
	}
}

// startConsumer starts a consumer process with cc and lets it go, with the
// files of the consumer protocol: its message pipe, its sub-cgroup's
// cgroup.procs to join through and, with a cycle log, the cycle board.
func (r *execution) startConsumer(cc consumer.Config) (*exec.Cmd, *os.File, io.WriteCloser, *logWriter, error) {
	repR, repW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	unified, err := r.levers.unifiedJoin(cc.Index)
	if err != nil {
		repR.Close()
		repW.Close()
		return nil, nil, nil, nil, fmt.Errorf("consumer %d's group in the unified hierarchy: %w", cc.Index, err)
	}
	if unified != nil {
		defer unified.Close() // the consumer has its own once started
		cc.JoinUnified = true
	}
	cmd := exec.Command(r.cfg.Binary, cc.Args()...)
	var board *os.File
	if cc.CycleLog {
		board = r.board.File
	}
	cmd.ExtraFiles = consumer.ExtraFiles(repW, r.joins[cc.Index], board, unified)
	stderr := &logWriter{l: r.cfg.Logger.With("run", r.cfg.ID, "consumer", cc.Index), done: make(chan struct{})}
	// Its stderr through a pipe read here with a small buffer: an
	// io.Writer as cmd.Stderr would make os/exec hold a copy buffer for
	// the consumer's whole life (bench/README.md, Where the defaults come
	// from).
	errR, errW, err := os.Pipe()
	if err != nil {
		repR.Close()
		repW.Close()
		return nil, nil, nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = nil, errW
	cmd.Env = consumer.Env(os.Environ())
	// Its own process group: a Ctrl-C at the terminal reaches the run,
	// which stops it, and not each consumer behind its back.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	ctl, err := cmd.StdinPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		closeAll(repR, repW, errR, errW)
		return nil, nil, nil, nil, err
	}
	closeAll(repW, errW)
	go stderr.copyFrom(errR)
	if err := r.admit(cmd, ctl); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		repR.Close()
		return nil, nil, nil, nil, fmt.Errorf("starting consumer %d: %w", cc.Index, err)
	}
	return cmd, repR, ctl, stderr, nil
}

// admit lets a started consumer go: where a swap device is emulated on v1,
// it first joins the run's blkio group, so its reads are throttled from
// its start (its memory cgroup it joins at its planned start).
func (r *execution) admit(cmd *exec.Cmd, ctl io.Writer) error {
	if r.io != nil {
		if err := r.io.Add(cmd.Process.Pid); err != nil {
			return err
		}
	}
	_, err := ctl.Write([]byte{consumer.ControlGo})
	return err
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// readMessages applies a consumer's messages until it closes the pipe.
func (r *execution) readMessages(i int, pipe io.Reader) {
	// Cycles come on the cycle board when the run has one; on the pipe,
	// one read takes whatever messages are buffered.
	rd := bufio.NewReaderSize(pipe, 64*consumer.MessageSize)
	for {
		rep, err := consumer.ReadMessage(rd)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.cfg.Logger.Warn("bad message from a consumer", "run", r.cfg.ID, "consumer", i, "err", err)
			}
			return
		}
		r.apply(i, rep)
	}
}

// exited records how consumer i ended. lastErr is the last line it wrote
// to stderr. A consumer that ended in a way the run did not cause, other
// than by the OOM killer, fails the run at once: what is left of it is no
// longer the experiment that was asked for.
func (r *execution) exited(i int, ps *os.ProcessState, waitErr error, lastErr string) {
	r.mu.Lock()
	c := &r.rec.Consumers[i]
	now := r.cfg.Now()
	if c.ActualEnd == nil && c.ActualStart != nil {
		c.ActualEnd = &now
		if late := now.Sub(c.PlannedEnd); late > 0 && r.traits.Scheduled {
			c.LatenessSeconds = late.Seconds()
		}
	}
	r.takeLocked(i) // the last ones, of a consumer killed mid-cycle too
	exit := r.exitString(ps, waitErr)
	c.Exit = exit
	pid := c.PID
	r.mu.Unlock()
	who := fmt.Sprintf("consumer %d (pid %d)", i, pid)
	switch {
	case exit == "ok" || exit == "terminated":
	case exit == "oom-killed":
		// A thrashing memcg can OOM with swap still free when reclaim runs
		// out of retries; that is an outcome to record, not to hide.
		r.cfg.Logger.Warn("the OOM killer killed a consumer; it is not respawned", "run", r.cfg.ID, "consumer", i)
	case exit == "killed":
		r.failNow(who + " was killed (SIGKILL) by a process outside the run, not by the run or the OOM killer")
	case strings.HasPrefix(exit, "exit "):
		reason := who + " failed (" + exit + ")"
		if lastErr != "" {
			reason += ": " + lastErr
		}
		r.failNow(reason)
	default:
		r.failNow(who + " ended by " + exit)
	}
	r.changes.Add(1)
}

// exitString names how a consumer ended. Called with r.mu held.
func (r *execution) exitString(ps *os.ProcessState, waitErr error) string {
	if ps == nil {
		return "unknown: " + waitErr.Error()
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		return ps.String()
	case ws.Exited() && ws.ExitStatus() == 0:
		if r.ctx.Err() != nil {
			return "terminated"
		}
		return "ok"
	case ws.Exited():
		return fmt.Sprintf("exit %d", ws.ExitStatus())
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL:
		// The OOM killer's, when the count of the run cgroup's tree says
		// one more than those already told: the run's own SIGKILLs (at
		// its end) are not counted there, and the killer may take a
		// consumer then too (parked on v1, when the guard lets go).
		if n, err := r.cg.OOMKills(); err == nil && n > r.oomBefore {
			r.oomBefore++
			return "oom-killed"
		}
		return "killed"
	default:
		return "signal " + ws.Signal().String()
	}
}

// terminate asks every live consumer to stop and gives them stopGrace.
func (r *execution) terminate(allExited <-chan struct{}) {
	r.mu.Lock()
	for i, p := range r.procs {
		if p != nil && r.rec.Consumers[i].Exit == "" {
			_ = p.Signal(syscall.SIGTERM)
			_ = p.Signal(syscall.SIGCONT) // one stopped from outside handles it too
		}
	}
	r.mu.Unlock()
	select {
	case <-allExited:
	case <-time.After(stopGrace):
	}
}

// kill sends SIGKILL to every consumer not yet reaped.
func (r *execution) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range r.procs {
		if p != nil && r.rec.Consumers[i].Exit == "" {
			_ = p.Kill()
		}
	}
}

// logWriter turns a consumer's stderr into log lines, and keeps the last
// one for the reason a run fails, or, when the consumer crashed, the Go
// runtime's first line, which names the cause: the last line of a crash is
// the end of a goroutine's stack.
type logWriter struct {
	l     *slog.Logger
	mu    sync.Mutex
	last  string
	crash string
	// done is closed when copyFrom has read its pipe to the end.
	done chan struct{}
}

// copyFrom writes what a consumer prints on its stderr until the pipe
// closes (the consumer exited), then closes the pipe.
func (w *logWriter) copyFrom(pipe *os.File) {
	defer close(w.done)
	defer pipe.Close()
	buf := make([]byte, 4096)
	for {
		n, err := pipe.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// crashHeads begin the line in which the Go runtime says why a process
// died.
var crashHeads = []string{"fatal error:", "panic:", "unexpected fault address", "runtime: out of memory"}

func (w *logWriter) Write(b []byte) (int, error) {
	w.l.Warn("consumer: " + string(b))
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		for _, head := range crashHeads {
			if strings.HasPrefix(line, head) {
				w.mu.Lock()
				if w.crash == "" {
					w.crash = clipReason(line)
				}
				w.mu.Unlock()
			}
		}
	}
	if line := strings.TrimSpace(string(b)); line != "" {
		if j := strings.LastIndexByte(line, '\n'); j >= 0 {
			line = line[j+1:]
		}
		w.mu.Lock()
		w.last = clipReason(line)
		w.mu.Unlock()
	}
	return len(b), nil
}

// clipReason makes a line fit the record's reason: printable, and short.
func clipReason(line string) string {
	line = run.Printable(line)
	if len(line) > maxReasonLine {
		line = strings.ToValidUTF8(line[:maxReasonLine], "") + "…"
	}
	return line
}

// Last is the line that says why the consumer ended: the Go runtime's
// first line of a crash, else the last line written; after copyFrom, of
// all the consumer printed (it waits for the pipe's end).
func (w *logWriter) Last() string {
	if w.done != nil {
		<-w.done
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.crash != "" {
		return w.crash
	}
	return w.last
}
