package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
)

// env is where a scenario's own workload runs: memory groups made beneath
// the bench's own (cgroup v1 or v2), and on a v1 host a group in the
// unified hierarchy beside each for its PSI and its cgroup id, at the depth
// of a run's cgroup, so that the observer names it as it names a run.
type env struct {
	self, tmp string
	mem, uni  cgroup.Parent
	made      []*groups
}

func newEnv(tmp string) (*env, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	mem, err := cgroup.Own("/proc")
	if err == nil {
		err = mem.Check()
	}
	if err != nil {
		return nil, fmt.Errorf("a memory cgroup of this process to make the scenarios' under: %w", err)
	}
	uni, err := cgroup.OwnUnified("/proc")
	if err != nil {
		return nil, fmt.Errorf("a cgroup2 group of this process: %w", err)
	}
	return &env{self: self, tmp: tmp, mem: mem, uni: uni}, nil
}

// groups is a scenario's memory group and, on a v1 host, its unified twin.
type groups struct {
	mem, psi *cgroup.Cgroup
	limit    int64
	// guard is the OOM guard a run's cgroup has: a thrash this deep
	// otherwise loses a process to the OOM killer with swap free.
	guard *cgroup.OOMGuard
}

func (e *env) group(name string, limit int64) (*groups, error) {
	tag := fmt.Sprintf("alerts-%s-%d", name, os.Getpid())
	m, err := e.mem.Create(tag, cgroup.Limits{MemoryBytes: limit})
	if err != nil {
		return nil, err
	}
	g := &groups{mem: m, psi: m, limit: limit}
	if g.guard, err = m.GuardOOM(limit); err != nil {
		g.destroy()
		return nil, err
	}
	if !m.V2 {
		if g.psi, err = e.uni.CreatePressureGroup(tag); err != nil {
			g.psi = nil
			g.destroy()
			return nil, err
		}
	}
	e.made = append(e.made, g)
	return g, nil
}

func (g *groups) add(pid int) error {
	if err := g.mem.Add(pid); err != nil {
		return err
	}
	if g.psi != g.mem {
		return g.psi.Add(pid)
	}
	return nil
}

// reclaim takes about n bytes from the group, as proactive reclaim does:
// memory.reclaim on cgroup v2; on v1, which has none, the limit is lowered
// by n below the usage and put back.
func (g *groups) reclaim(n int64) error {
	if g.mem.V2 {
		err := os.WriteFile(filepath.Join(g.mem.Path, "memory.reclaim"), []byte(strconv.FormatInt(n, 10)), 0)
		if errors.Is(err, unix.EAGAIN) {
			err = nil // reclaimed less than asked
		}
		return err
	}
	b, err := os.ReadFile(filepath.Join(g.mem.Path, "memory.usage_in_bytes"))
	if err != nil {
		return err
	}
	usage, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return err
	}
	limit := filepath.Join(g.mem.Path, "memory.limit_in_bytes")
	err = os.WriteFile(limit, []byte(strconv.FormatInt(max(8*mib, usage-n), 10)), 0)
	if errors.Is(err, unix.EBUSY) {
		err = nil // could not get all the way down
	}
	return errors.Join(err, os.WriteFile(limit, []byte(strconv.FormatInt(g.limit, 10)), 0))
}

// limitReached says whether the group's demand has met its limit.
func (g *groups) limitReached() bool { return atLimit(g.mem.Path) }

// atLimit says whether the memory group at dir has met its limit: v1's
// memory.failcnt, or v2's memory.events high or max (the OOM guard sets
// memory.high below memory.max).
func atLimit(dir string) bool {
	if b, err := os.ReadFile(filepath.Join(dir, "memory.failcnt")); err == nil {
		return strings.TrimSpace(string(b)) != "0"
	}
	b, err := os.ReadFile(filepath.Join(dir, "memory.events"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && (f[0] == "max" || f[0] == "high") && f[1] != "0" {
			return true
		}
	}
	return false
}

// whenFull is begin followed by the moment the group's demand first met its
// limit (polled every 10 ms, for at most a minute): a thrash's onset.
func (g *groups) whenFull(begin func() (time.Time, error)) func() (time.Time, error) {
	return func() (time.Time, error) {
		if _, err := begin(); err != nil {
			return time.Time{}, err
		}
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if g.limitReached() {
				return time.Now(), nil
			}
		}
		return time.Time{}, fmt.Errorf("%s never reached its %d MiB limit", g.mem.Path, g.limit>>20)
	}
}

// peak is the most memory the group has held: v1's
// memory.max_usage_in_bytes, v2's memory.peak (Linux 5.19+).
func (g *groups) peak() (int64, error) {
	file := "memory.max_usage_in_bytes"
	if g.mem.V2 {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(g.mem.Path, file))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// peak is the largest peak of the env's groups.
func (e *env) peak() (int64, error) {
	var most int64
	for _, g := range e.made {
		n, err := g.peak()
		if err != nil {
			return 0, err
		}
		most = max(most, n)
	}
	return most, nil
}

func (g *groups) destroy() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs := []*cgroup.Cgroup{g.mem}
	if g.psi != nil && g.psi != g.mem {
		cs = append(cs, g.psi)
	}
	for _, c := range cs {
		if err := c.Destroy(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "alerts:", err)
		}
	}
	g.guard.Close()
}

// close removes every group made, killing what is left in them.
func (e *env) close() {
	for _, g := range e.made {
		g.destroy()
	}
	e.made = nil
}

// spawn starts n of the bench's workloads in g, each told to go by begin;
// extra files are the children's fd 3 onwards.
func (e *env) spawn(g *groups, n int, args func(i int) []string, extra ...*os.File) (*job, error) {
	cmds, gos, err := e.startWorkers(g, n, args, extra)
	if err != nil {
		return nil, err
	}
	stop := func() {
		killAll(cmds)
		cmds = nil
	}
	var once sync.Once
	var waitErr error
	return &job{
		target: "/" + filepath.Base(g.psi.Path),
		begin: func() (time.Time, error) {
			now := time.Now()
			for _, w := range gos {
				_, _ = w.Write([]byte("go\n"))
				w.Close()
			}
			return now, nil
		},
		wait: func(ctx context.Context) error {
			once.Do(func() {
				done := make(chan error, len(cmds))
				for _, c := range cmds {
					go func() { done <- c.Wait() }()
				}
				for range cmds {
					select {
					case err := <-done:
						if err != nil && waitErr == nil {
							waitErr = fmt.Errorf("a workload of %s: %w", g.mem.Path, err)
						}
					case <-ctx.Done():
						waitErr = ctx.Err()
						return
					}
				}
				cmds = nil
			})
			return waitErr
		},
		stop: stop,
	}, nil
}

// startWorkers starts n of the bench's workloads in g, each waiting on its
// stdin (returned) for the word to go; on failure none is left.
func (e *env) startWorkers(g *groups, n int, args func(i int) []string, extra []*os.File) ([]*exec.Cmd, []*os.File, error) {
	var cmds []*exec.Cmd
	var gos []*os.File
	for i := range n {
		c := exec.Command(e.self, append([]string{"work"}, args(i)...)...)
		c.Stdout, c.Stderr, c.ExtraFiles = os.Stdout, os.Stderr, extra
		in, err := c.StdinPipe()
		if err == nil {
			err = c.Start()
		}
		if err != nil {
			killAll(cmds)
			return nil, nil, err
		}
		cmds = append(cmds, c)
		gos = append(gos, in.(*os.File))
		if err := g.add(c.Process.Pid); err != nil {
			killAll(cmds)
			return nil, nil, err
		}
	}
	return cmds, gos, nil
}

// killAll kills the commands and reaps them.
func killAll(cmds []*exec.Cmd) {
	for _, c := range cmds {
		_ = c.Process.Kill()
	}
	for _, c := range cmds {
		_ = c.Wait()
	}
}

// coldFile writes size random bytes to a file in tmp and drops it from the
// page cache.
func (e *env) coldFile(name string, size int64) (string, error) {
	return e.coldFileAt(filepath.Join(e.tmp, name), size)
}

func (e *env) coldFileAt(path string, size int64) (string, error) {
	buf := make([]byte, min(size, 4*mib))
	fillRandom(buf)
	var data []byte
	for int64(len(data)) < size {
		data = append(data, buf[:min(int64(len(buf)), size-int64(len(data)))]...)
	}
	return path, coldWrite(path, data, 0o600)
}

// coldWrite writes a file, syncs it and drops its pages from the cache, so
// that the first reads of it go to the disk.
func coldWrite(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
