package workload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/cgroup"
)

// fileidKernfs is the file handle type of a kernfs node, whose handle is
// its 64-bit id: for cgroup2, the cgroup's id, which is what the BPF
// programs key on (bpf_get_current_cgroup_id).
const fileidKernfs = 0xfe

// ErrGone says a cgroup was removed.
var ErrGone = errors.New("the cgroup was removed")

// Resolver names cgroup v2 ids by their path in the hierarchy. It opens an
// id's directory by handle (open_by_handle_at, which needs
// CAP_DAC_READ_SEARCH), and falls back to walking the mount and matching
// inode numbers where that is refused. Not safe for concurrent use.
type Resolver struct {
	h       cgroup.Hierarchy
	mountFD int // -1 once handles are refused: walk instead
	paths   map[uint64]string
}

// NewResolver opens the hierarchy h for resolving. Without
// CAP_DAC_READ_SEARCH (a hardened unit grants root only what it needs) it
// walks from the start, and never asks for a handle it would be refused.
func NewResolver(h cgroup.Hierarchy) (*Resolver, error) {
	if fi, err := os.Stat(h.Point); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("the cgroup2 mount %s: not a directory (%v)", h.Point, err)
	}
	r := &Resolver{h: h, mountFD: -1, paths: map[uint64]string{}}
	if !mayOpenByHandle() {
		return r, nil
	}
	fd, err := unix.Open(h.Point, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the cgroup2 mount %s: %w", h.Point, err)
	}
	r.mountFD = fd
	return r, nil
}

// mayOpenByHandle says whether this process holds CAP_DAC_READ_SEARCH,
// which open_by_handle_at needs.
func mayOpenByHandle() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_DAC_READ_SEARCH) != 0
		}
	}
	return false
}

// Close releases the mount's descriptor.
func (r *Resolver) Close() error {
	if r.mountFD < 0 {
		return nil
	}
	err := unix.Close(r.mountFD)
	r.mountFD = -1
	return err
}

// Path is id's cgroup path from the hierarchy's root ("/" for the root
// itself), or ErrGone when it was removed. A path once found is kept until
// Check finds it gone.
func (r *Resolver) Path(id uint64) (string, error) {
	if p, ok := r.paths[id]; ok {
		return p, nil
	}
	dir, err := r.open(id)
	if err != nil {
		return "", err
	}
	p := r.relative(dir)
	r.paths[id] = p
	return p, nil
}

// Check says whether id's cgroup is still there (a stat of the path found
// before, its inode held to the id), and forgets it when it is not.
func (r *Resolver) Check(id uint64) bool {
	p, ok := r.paths[id]
	if !ok {
		return false
	}
	var st unix.Stat_t
	if unix.Stat(filepath.Join(r.h.Point, p), &st) != nil || st.Ino != id {
		delete(r.paths, id)
		return false
	}
	return true
}

// Drop forgets id's path.
func (r *Resolver) Drop(id uint64) { delete(r.paths, id) }

// relative turns a directory under the mount into the cgroup's path.
func (r *Resolver) relative(dir string) string {
	rel, err := filepath.Rel(r.h.Point, dir)
	if err != nil || rel == "." {
		rel = ""
	}
	return filepath.Join("/", r.h.Root, rel)
}

// open finds the directory of id: by handle, else by walking.
func (r *Resolver) open(id uint64) (string, error) {
	if r.mountFD >= 0 {
		dir, err := r.byHandle(id)
		switch {
		case err == nil:
			return dir, nil
		case errors.Is(err, syscall.ESTALE), errors.Is(err, syscall.ENOENT):
			return "", ErrGone
		case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.EINVAL):
			_ = r.Close() // handles refused here: walk from now on
		default:
			return "", err
		}
	}
	return r.walk(id)
}

func (r *Resolver) byHandle(id uint64) (string, error) {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], id)
	fd, err := unix.OpenByHandleAt(r.mountFD, unix.NewFileHandle(fileidKernfs, b[:]), unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	dir, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(dir, r.h.Point) {
		return "", fmt.Errorf("cgroup %d opened at %s, outside the mount %s", id, dir, r.h.Point)
	}
	return dir, nil
}

// walk looks for id among the mount's directories, and keeps every path it
// passes (and only those: a path not passed is gone), so that one walk
// names the cgroups seen with it.
func (r *Resolver) walk(id uint64) (string, error) {
	found := ""
	fresh := map[uint64]string{}
	err := filepath.WalkDir(r.h.Point, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil // a group removed mid-walk
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return nil
		}
		fresh[st.Ino] = r.relative(p)
		if st.Ino == id {
			found = p
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	r.paths = fresh
	if found == "" {
		return "", ErrGone
	}
	return found, nil
}
