package vmtest

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// An initramfs is a cpio archive in the "newc" format the kernel unpacks
// into its root file system (Documentation/driver-api/early-userspace/
// buffer-format.rst): each entry a 110-byte ASCII header of hexadecimal
// fields, its name, and its data, each padded to 4 bytes; a last entry
// named TRAILER!!! ends it.

// Entry is one file, directory or symbolic link of an archive.
type Entry struct {
	Name string // without a leading slash: "bin/sh"
	Mode fs.FileMode
	// Data is a file's content, or a link's target.
	Data []byte
	// Open, when set, gives a file's content instead of Data, and Size
	// its length: a large binary is streamed, not held.
	Open func() (io.ReadCloser, error)
	Size int64
}

// writeCPIO writes the entries as a newc archive, each directory on the way
// to an entry made first, once.
func writeCPIO(w io.Writer, entries []Entry) error {
	cw := &cpioWriter{w: w, dirs: map[string]bool{".": true}}
	for _, e := range entries {
		if e.Mode.IsDir() && cw.dirs[strings.TrimPrefix(path.Clean(e.Name), "/")] {
			continue // made already, on the way to another entry
		}
		if err := cw.parents(e.Name); err != nil {
			return err
		}
		if err := cw.entry(e); err != nil {
			return fmt.Errorf("%s: %w", e.Name, err)
		}
	}
	if err := cw.header("TRAILER!!!", 0, 0); err != nil {
		return err
	}
	return cw.pad()
}

type cpioWriter struct {
	w    io.Writer
	n    int64 // bytes written
	ino  int
	dirs map[string]bool
}

func (c *cpioWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return err
}

// pad writes zeros up to the next multiple of 4 bytes.
func (c *cpioWriter) pad() error {
	if r := c.n % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

func (c *cpioWriter) parents(name string) error {
	var missing []string
	for d := path.Dir(name); !c.dirs[d]; d = path.Dir(d) {
		missing = append(missing, d)
		c.dirs[d] = true
	}
	for _, d := range slices.Backward(missing) {
		if err := c.entry(Entry{Name: d, Mode: fs.ModeDir | 0o755}); err != nil {
			return err
		}
	}
	return nil
}

// modeBits is a file mode as stat's st_mode.
func modeBits(m fs.FileMode) (uint32, error) {
	perm := uint32(m.Perm())
	switch {
	case m.IsDir():
		return 0o040000 | perm, nil
	case m&fs.ModeSymlink != 0:
		return 0o120000 | 0o777, nil
	case m.IsRegular():
		return 0o100000 | perm, nil
	}
	return 0, fmt.Errorf("mode %s: only files, directories and links go in an initramfs", m)
}

func (c *cpioWriter) entry(e Entry) error {
	name := strings.TrimPrefix(path.Clean(e.Name), "/")
	if e.Mode.IsDir() {
		c.dirs[name] = true
	}
	mode, err := modeBits(e.Mode)
	if err != nil {
		return err
	}
	size := int64(len(e.Data))
	if e.Open != nil {
		size = e.Size
	}
	if err := c.header(name, mode, size); err != nil {
		return err
	}
	if e.Open == nil {
		err = c.write(e.Data)
	} else {
		var r io.ReadCloser
		if r, err = e.Open(); err != nil {
			return err
		}
		var n int64
		n, err = io.Copy(writerFunc(c.write), r)
		r.Close()
		if err == nil && n != size {
			err = fmt.Errorf("read %d bytes, its size said %d", n, size)
		}
	}
	if err != nil {
		return err
	}
	return c.pad()
}

// header writes an entry's header and name.
func (c *cpioWriter) header(name string, mode uint32, size int64) error {
	if size > 0xffffffff {
		return fmt.Errorf("%d bytes: newc holds at most 4 GiB a file", size)
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize (with its NUL), check.
	h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	if err := c.write([]byte(h + name + "\x00")); err != nil {
		return err
	}
	return c.pad()
}

// writerFunc adapts a write function to io.Writer.
type writerFunc func([]byte) error

func (f writerFunc) Write(b []byte) (int, error) {
	if err := f(b); err != nil {
		return 0, err
	}
	return len(b), nil
}
