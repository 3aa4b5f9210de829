// Package outdir is how thrashscope writes into a directory a user names:
// observer report --out, observer compare --out, loadgen run --out and the
// observer's --data.dir. These run as root, often under /var/tmp, where any
// local user can make the directory first or plant a link in it. So the
// directory is checked once and opened (os.Root): it must be the caller's
// own and not writable by other users; nothing inside it is reached through
// a link; and every file is written to a new temporary file and renamed
// into place, which replaces a link at that name instead of following it.
package outdir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Dir is an output directory, open.
type Dir struct {
	root *os.Root
	path string
	// lock is the directory held by Lock, closed with it.
	lock *os.File
}

// Open makes path (with its parents, mode perm) when it is missing, then
// opens it. It refuses a path that is a link owned by another user, and a
// directory another user owns or that users other than its owner and group
// can write to.
func Open(path string, perm fs.FileMode) (*Dir, error) {
	if path == "" {
		return nil, errors.New("no directory given")
	}
	if err := os.MkdirAll(path, perm); err != nil {
		return nil, fmt.Errorf("cannot make %s: %w; choose a directory you can write", path, err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if err := owned(path+" (a symbolic link)", fi); err != nil {
			return nil, err
		}
	}
	root, err := os.OpenRoot(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	d := &Dir{root: root, path: path}
	if err := d.check("."); err != nil {
		root.Close()
		return nil, err
	}
	return d, nil
}

// Path is the directory's path as given.
func (d *Dir) Path() string { return d.path }

// Close closes the directory, and frees it if it was locked.
func (d *Dir) Close() error {
	if d.lock != nil {
		d.lock.Close()
		d.lock = nil
	}
	return d.root.Close()
}

// ErrLocked says another process holds the directory (Lock).
var ErrLocked = errors.New("another process uses it")

// Lock holds the directory for this process until Close: an exclusive
// flock(2) on the directory itself, freed by the kernel when the process
// dies. A second process that locks it gets ErrLocked.
func (d *Dir) Lock() error {
	f, err := d.root.Open(".")
	if err != nil {
		return fmt.Errorf("locking %s: %w", d.path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("%s: %w", d.path, ErrLocked)
		}
		return fmt.Errorf("locking %s: %w", d.path, err)
	}
	d.lock = f
	return nil
}

// Private refuses a directory its group or other users can write: for
// one whose files a root process acts on (the host settings' journal),
// the group's members are other users too.
func (d *Dir) Private() error {
	fi, err := d.root.Stat(".")
	if err != nil {
		return fmt.Errorf("checking %s: %w", d.path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("%s is writable by its group or others (mode %s): only its owner may write it; chmod go-w %s", d.path, perm, d.path)
	}
	return nil
}

// OpenFile opens name (one path element) in the directory, never through
// a link and without blocking on a FIFO planted there.
func (d *Dir) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	if err := element(name); err != nil {
		return nil, err
	}
	f, err := d.root.OpenFile(name, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// check holds the directory name (in d) to the rules of Open.
func (d *Dir) check(name string) error {
	fi, err := d.root.Stat(name)
	if err != nil {
		return fmt.Errorf("checking %s: %w", d.join(name), err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", d.join(name))
	}
	return owned(d.join(name), fi)
}

// owned refuses what another user owns, and a directory other users can
// write to.
func owned(what string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot tell its owner", what)
	}
	if me := os.Geteuid(); int(st.Uid) != me {
		return fmt.Errorf("%s is owned by uid %d, not by you (uid %d): its owner could point what thrashscope writes there elsewhere; remove it or give a directory of your own", what, st.Uid, me)
	}
	if fi.IsDir() && fi.Mode().Perm()&0o002 != 0 {
		return fmt.Errorf("%s is writable by every user (mode %s): another user could plant links in it; chmod o-w it or give another directory", what, fi.Mode().Perm())
	}
	return nil
}

func (d *Dir) join(name string) string {
	if name == "." {
		return d.path
	}
	return filepath.Join(d.path, name)
}

// Sub makes the subdirectory name (one path element) when it is missing,
// and opens it. A link at name is refused, not followed.
func (d *Dir) Sub(name string, perm fs.FileMode) (*Dir, error) {
	if err := element(name); err != nil {
		return nil, err
	}
	if err := d.root.Mkdir(name, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("cannot make %s: %w", d.join(name), err)
	}
	if err := d.notLink(name); err != nil {
		return nil, err
	}
	if err := d.check(name); err != nil {
		return nil, err
	}
	root, err := d.root.OpenRoot(name)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", d.join(name), err)
	}
	return &Dir{root: root, path: d.join(name)}, nil
}

func (d *Dir) notLink(name string) error {
	fi, err := d.root.Lstat(name)
	if err != nil {
		return fmt.Errorf("checking %s: %w", d.join(name), err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symbolic link: thrashscope does not write through links; remove it", d.join(name))
	}
	return nil
}

// WriteFile writes name whole: a new temporary file beside it, synced,
// then renamed over it, so a reader sees the old file or the new one, and
// a link or a file planted at name is replaced, never written through.
func (d *Dir) WriteFile(name string, data []byte, perm fs.FileMode) error {
	if err := element(name); err != nil {
		return err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := TempPrefix + name + "-" + hex.EncodeToString(rnd[:])
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return fmt.Errorf("writing %s: %w", d.join(name), err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.root.Rename(tmp, name)
	}
	if err != nil {
		_ = d.root.Remove(tmp)
		return fmt.Errorf("writing %s: %w", d.join(name), err)
	}
	// The rename is durable once the directory is.
	if df, err := d.root.Open("."); err == nil {
		_ = df.Sync()
		df.Close()
	}
	return nil
}

// ReadFile reads name, a regular file of at most max bytes, never through a
// link; fs.ErrNotExist when it is missing.
func (d *Dir) ReadFile(name string, max int64) ([]byte, error) {
	return d.readFile(name, max, false)
}

// ReadPrivateFile is ReadFile of a file that must also be its reader's own
// and writable by no one else: input a root process acts on.
func (d *Dir) ReadPrivateFile(name string, max int64) ([]byte, error) {
	return d.readFile(name, max, true)
}

func (d *Dir) readFile(name string, max int64, private bool) ([]byte, error) {
	f, err := d.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > max {
		return nil, fmt.Errorf("%s: not a regular file of at most %d bytes; move it away", d.join(name), max)
	}
	if private {
		if err := owned(d.join(name), fi); err != nil {
			return nil, err
		}
		if perm := fi.Mode().Perm(); perm&0o022 != 0 {
			return nil, fmt.Errorf("%s is writable by its group or others (mode %s): thrashscope wrote it 0600; remove it", d.join(name), perm)
		}
	}
	b := make([]byte, fi.Size())
	_, err = io.ReadFull(f, b)
	return b, err
}

// TempPrefix starts the name of a file WriteFile has not finished; Open's
// callers may clear such leftovers of a crash.
const TempPrefix = ".tmp-"

// RemoveAll removes name and everything under it, without following a link
// out of the directory.
func (d *Dir) RemoveAll(name string) error {
	if err := element(name); err != nil {
		return err
	}
	return d.root.RemoveAll(name)
}

// element refuses a name that is not one element of a path.
func element(name string) error {
	if name == "" || name == "." || name == ".." || filepath.Base(name) != name {
		return fmt.Errorf("%q is not a file name", name)
	}
	return nil
}
