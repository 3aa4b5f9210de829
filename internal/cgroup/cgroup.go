// Package cgroup is the load generator's sandbox: each run gets one
// memory-limited cgroup, made by thrashscope beneath the observer's own (or
// --cgroup.parent), that its consumer processes are put in so that the
// thrash they induce stays inside the limit. It works on cgroup v1 (the
// memory hierarchy) and v2. It only ever writes to cgroups it made itself,
// which carry Prefix in their names; the parent is only read, and gains or
// loses child directories.
package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/thrashscope/thrashscope/internal/kernfile"
	"golang.org/x/sys/unix"
)

// Prefix names every cgroup thrashscope creates; only cgroups with it are
// ever removed by Sweep.
const Prefix = "thrashscope-"

// ErrUnusable is wrapped by the errors of Check and ParentAt: run cgroups
// cannot be made under that parent. The API answers it with 422.
var ErrUnusable = errors.New("cannot hold run cgroups")

// destroyTimeout bounds Destroy when its context has no deadline: a task
// stuck in uninterruptible sleep must not hang the caller forever.
const destroyTimeout = 10 * time.Second

// Parent is a directory under which run cgroups are made.
type Parent struct {
	Path string
	V2   bool
}

// Limits are what a run cgroup enforces.
type Limits struct {
	// MemoryBytes is the memory limit; it must be positive.
	MemoryBytes int64
	// NoSwap keeps the cgroup's anonymous memory out of swap, so a
	// page-cache thrash stays one whether or not the host has swap.
	NoSwap bool
}

// Cgroup is a run cgroup made by thrashscope.
type Cgroup struct {
	Path string
	V2   bool
	// lock is the cgroup directory, open with an exclusive flock, while
	// this process owns the cgroup (from Create to Destroy). Another
	// observer's Sweep sees the lock and leaves the cgroup alone; the
	// kernel drops it when the owner dies, so a crashed owner's cgroup is
	// swept.
	lock *os.File
}

// setting is one control file written when a cgroup is made.
type setting struct {
	file, value string
	// optional settings may be missing from the kernel (memory.swap.max
	// without swap accounting).
	optional bool
}

// ParentAt validates a --cgroup.parent path.
func ParentAt(path string) (Parent, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Parent{}, fmt.Errorf("cgroup parent %s: %w", path, err)
	}
	v2, err := fsVersion(abs)
	if err != nil {
		return Parent{}, fmt.Errorf("cgroup parent %s: %w: %w", abs, ErrUnusable, err)
	}
	p := Parent{Path: abs, V2: v2}
	return p, p.Check()
}

// Check says whether run cgroups can be made here, with an error naming the
// fix.
func (p Parent) Check() error {
	v2, err := fsVersion(p.Path)
	if err != nil {
		return fmt.Errorf("cgroup parent %s: %w: %w", p.Path, ErrUnusable, err)
	}
	if v2 != p.V2 {
		return fmt.Errorf("cgroup parent %s: %w: it is on cgroup %s, not %s", p.Path, ErrUnusable, version(v2), version(p.V2))
	}
	if p.V2 {
		err = checkV2(p.Path)
	} else {
		err = checkV1(p.Path)
	}
	if err != nil {
		return fmt.Errorf("cgroup parent %s: %w: %w", p.Path, ErrUnusable, err)
	}
	if err := unix.Access(p.Path, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("cgroup parent %s: %w: %w", p.Path, ErrUnusable, hint(&fs.PathError{Op: "access", Path: p.Path, Err: err}))
	}
	return nil
}

// Create makes <parent>/<Prefix><name> with the limits. If a limit cannot be
// set, the directory is removed again.
func (p Parent) Create(name string, l Limits) (*Cgroup, error) {
	if l.MemoryBytes <= 0 {
		return nil, fmt.Errorf("creating cgroup %s: memory limit %d bytes: must be positive", p.child(name), l.MemoryBytes)
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	if p.V2 {
		return p.create(name, settingsV2(l))
	}
	return p.create(name, settingsV1(l))
}

// CreatePressureGroup makes <parent>/<Prefix><name> on cgroup v2 with no
// limit: what is put in it is only watched, through its memory.pressure.
func (p Parent) CreatePressureGroup(name string) (*Cgroup, error) {
	if !p.V2 {
		return nil, fmt.Errorf("creating a pressure group under %s: it is on cgroup v1, which has no per-group PSI; use the unified hierarchy", p.Path)
	}
	return p.create(name, nil)
}

func (p Parent) child(name string) string { return filepath.Join(p.Path, Prefix+name) }

func (p Parent) create(name string, settings []setting) (*Cgroup, error) {
	if name == "" || strings.ContainsRune(name, '/') || strings.ContainsRune(name, 0) {
		return nil, fmt.Errorf("creating cgroup under %s: invalid name %q: want a non-empty name without '/'", p.Path, name)
	}
	c := &Cgroup{Path: p.child(name), V2: p.V2}
	if err := os.Mkdir(c.Path, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("creating cgroup %s: %w: a previous run left it; Sweep removes it", c.Path, err)
		}
		return nil, fmt.Errorf("creating cgroup %s: %w", c.Path, hint(errno(err)))
	}
	lock, held, err := tryLock(c.Path)
	if err != nil || held {
		_ = os.Remove(c.Path)
		return nil, fmt.Errorf("creating cgroup %s: locking it for this process: %w", c.Path, errors.Join(err, errIf(held, "another process holds it")))
	}
	c.lock = lock
	for _, s := range settings {
		err := kernfile.WriteFile(filepath.Join(c.Path, s.file), []byte(s.value))
		if err == nil || s.optional && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		err = fmt.Errorf("creating cgroup %s: setting %s to %s: %w", c.Path, s.file, s.value, hint(errno(err)))
		// Nothing can be inside yet: a plain rmdir suffices.
		if rmErr := os.Remove(c.Path); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("removing it again: %w", rmErr))
		}
		c.lock.Close()
		return nil, err
	}
	return c, nil
}

// Child makes a sub-cgroup of c, one consumer's: it has no limit of its own
// (c's applies to its whole tree, hierarchically on v1 as on v2), so each
// lever a policy pulls can act on one consumer; c's Destroy removes it.
// On v2 c enables no controller for its children, so c itself holding
// processes stays allowed.
func (c *Cgroup) Child(name string) (*Cgroup, error) {
	if err := c.owned(); err != nil {
		return nil, err
	}
	if name == "" || strings.ContainsRune(name, '/') || strings.ContainsRune(name, 0) {
		return nil, fmt.Errorf("creating a cgroup under %s: invalid name %q: want a non-empty name without '/'", c.Path, name)
	}
	ch := &Cgroup{Path: filepath.Join(c.Path, Prefix+name), V2: c.V2}
	if c.V2 && c.hasController("memory") {
		// Each child its own memory cgroup, as on v1: it has the memory.*
		// files a policy's lever writes (memory.min), and its own LRU.
		// The parent holds no process (they are in its children), so the
		// kernel lets it enable the controller below it. A freeze group,
		// in a unified hierarchy without memory (memory on v1), has none.
		if err := kernfile.WriteFile(filepath.Join(c.Path, "cgroup.subtree_control"), []byte("+memory")); err != nil {
			return nil, fmt.Errorf("enabling memory for the children of %s: %w", c.Path, hint(errno(err)))
		}
	}
	if err := os.Mkdir(ch.Path, 0o755); err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", ch.Path, hint(errno(err)))
	}
	return ch, nil
}

// hasController reports whether a cgroup v2 group has the controller
// (cgroup.controllers: those its parent enabled for it).
func (c *Cgroup) hasController(name string) bool {
	b, err := os.ReadFile(filepath.Join(c.Path, "cgroup.controllers"))
	return err == nil && slices.Contains(strings.Fields(string(b)), name)
}

// Protect sets the cgroup's memory.min (cgroup v2): the kernel reclaims
// none of its memory while its usage is within it, whatever the pressure
// from its parent's limit. 0 ends the protection.
func (c *Cgroup) Protect(bytes int64) error {
	if err := c.owned(); err != nil {
		return err
	}
	if !c.V2 {
		return errors.New("memory.min is cgroup v2's: on v1 a process protects itself with mlock")
	}
	if err := kernfile.WriteFile(filepath.Join(c.Path, "memory.min"), []byte(strconv.FormatInt(bytes, 10))); err != nil {
		return fmt.Errorf("setting memory.min of %s: %w", c.Path, hint(err))
	}
	return nil
}

// Open returns a handle on an existing cgroup made by thrashscope.
func Open(path string, v2 bool) (*Cgroup, error) {
	if !strings.HasPrefix(filepath.Base(path), Prefix) {
		return nil, fmt.Errorf("opening cgroup %s: not made by thrashscope (no %q prefix)", path, Prefix)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("opening cgroup %s: %w", path, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("opening cgroup %s: not a directory", path)
	}
	got, err := fsVersion(path)
	if err != nil {
		return nil, fmt.Errorf("opening cgroup %s: %w", path, err)
	}
	if got != v2 {
		return nil, fmt.Errorf("opening cgroup %s: it is on cgroup %s, not %s", path, version(got), version(v2))
	}
	return &Cgroup{Path: filepath.Clean(path), V2: v2}, nil
}

// owned guards every write: a hand-built Cgroup must not turn a foreign
// cgroup into a target.
func (c *Cgroup) owned() error {
	if !strings.HasPrefix(filepath.Base(c.Path), Prefix) {
		return fmt.Errorf("cgroup %s: not made by thrashscope (no %q prefix); refusing to write to it", c.Path, Prefix)
	}
	return nil
}

// Add moves a process into the cgroup.
func (c *Cgroup) Add(pid int) error {
	if err := c.owned(); err != nil {
		return err
	}
	if err := kernfile.WriteFile(filepath.Join(c.Path, "cgroup.procs"), []byte(strconv.Itoa(pid))); err != nil {
		return fmt.Errorf("adding pid %d to cgroup %s: %w", pid, c.Path, hint(err))
	}
	return nil
}

// OpenProcs opens the cgroup's cgroup.procs for writing, for a child to
// join the cgroup by itself later (writing "0" moves the writer). The
// permission check is the opener's, so the child needs no rights of its
// own. The caller closes it.
func (c *Cgroup) OpenProcs() (*os.File, error) {
	if err := c.owned(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(c.Path, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("opening cgroup %s for consumers to join: %w", c.Path, hint(err))
	}
	return f, nil
}

// Destroy kills every process inside with SIGKILL, repeatedly, until none is
// left, then removes the cgroup (and any cgroups nested in it). It gives up
// at the context's deadline, or after 10 s if there is none, with an error
// listing the pids left. A missing directory is success.
func (c *Cgroup) Destroy(ctx context.Context) error {
	if err := c.owned(); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, destroyTimeout)
		defer cancel()
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		done, left, err := c.destroyRound()
		if done {
			if c.lock != nil {
				c.lock.Close() // gone: nothing left to hold
				c.lock = nil
			}
			return nil
		}
		select {
		case <-ctx.Done():
			if len(left) > 0 {
				return fmt.Errorf("destroying cgroup %s: processes %v still inside after SIGKILL: %w", c.Path, left, ctx.Err())
			}
			return fmt.Errorf("destroying cgroup %s: %w", c.Path, errors.Join(err, ctx.Err()))
		case <-tick.C:
		}
	}
}

// destroyRound signals what is inside and, once nothing is, removes the tree,
// deepest first. It reports done once the cgroup is gone, else the pids it
// signalled or the error that stopped the removal.
func (c *Cgroup) destroyRound() (done bool, left []int, err error) {
	dirs, err := subtree(c.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	for _, dir := range dirs {
		pids, err := readPIDs(dir)
		if errors.Is(err, fs.ErrNotExist) {
			if _, statErr := os.Stat(dir); statErr == nil {
				return false, nil, fmt.Errorf("%s is not a cgroup (no cgroup.procs)", dir)
			}
			continue
		}
		if err != nil {
			return false, nil, err
		}
		left = append(left, pids...)
	}
	if len(left) > 0 {
		// cgroup.kill (v2, Linux 5.14) cannot hit a reused pid and
		// catches tasks forked meanwhile; kill(2) is the fallback.
		if !c.V2 || kernfile.WriteFile(filepath.Join(c.Path, "cgroup.kill"), []byte("1")) != nil {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return false, left, nil
	}
	for _, dir := range dirs {
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			// EBUSY while exiting tasks are still being uncharged.
			return false, nil, fmt.Errorf("removing %s: %w", dir, hint(err))
		}
	}
	return true, nil, nil
}

// subtree lists dir and the cgroups nested in it, children before parents.
func subtree(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sub, err := subtree(filepath.Join(dir, e.Name()))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		dirs = append(dirs, sub...)
	}
	return append(dirs, dir), nil
}

// Forget drops this process's hold on the cgroup without destroying it,
// which is what the owner's death does: Sweep may then remove it.
func (c *Cgroup) Forget() {
	if c.lock != nil {
		c.lock.Close()
		c.lock = nil
	}
}

// tryLock opens a cgroup directory and takes an exclusive flock on it
// without waiting; held reports that another open file holds it.
func tryLock(dir string) (lock *os.File, held bool, err error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, true, nil
		}
		return nil, false, &fs.PathError{Op: "flock", Path: dir, Err: err}
	}
	return f, false, nil
}

func errIf(cond bool, msg string) error {
	if cond {
		return errors.New(msg)
	}
	return nil
}

// Sweep destroys the cgroups under the parent named Prefix+namePrefix*
// that no live process holds (see Cgroup.lock), such as those a crashed
// observer left, and returns the paths it removed. A run another observer or
// loadgen run is holding beside this one is left alone.
func (p Parent) Sweep(ctx context.Context, namePrefix string) ([]string, error) {
	if strings.ContainsRune(namePrefix, '/') {
		return nil, fmt.Errorf("sweeping cgroups under %s: invalid name prefix %q", p.Path, namePrefix)
	}
	entries, err := os.ReadDir(p.Path)
	if err != nil {
		return nil, fmt.Errorf("sweeping cgroups under %s: %w", p.Path, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), Prefix+namePrefix) {
			continue
		}
		c, err := Open(filepath.Join(p.Path, e.Name()), p.V2)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		lock, held, err := tryLock(c.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // removed by its owner meanwhile
		case err != nil:
			errs = append(errs, fmt.Errorf("cgroup %s: %w", c.Path, err))
			continue
		case held:
			continue // a live observer or loadgen run owns it
		}
		c.lock = lock
		if err := c.Destroy(ctx); err != nil {
			lock.Close()
			errs = append(errs, err)
			continue
		}
		removed = append(removed, c.Path)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("sweeping cgroups under %s: %w", p.Path, err)
	}
	return removed, nil
}

// fsVersion tells cgroup v2 from v1 by the filesystem's magic number.
func fsVersion(path string) (v2 bool, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	switch st.Type {
	case unix.CGROUP2_SUPER_MAGIC:
		return true, nil
	case unix.CGROUP_SUPER_MAGIC:
		return false, nil
	}
	return false, fmt.Errorf("%s is not in a cgroup filesystem", path)
}

func version(v2 bool) string {
	if v2 {
		return "v2"
	}
	return "v1"
}

// hint says what to do about a permission error.
func hint(err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w: run as root or delegate the cgroup", err)
	}
	return err
}

// errno drops the path from an error whose message names it already.
func errno(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}
