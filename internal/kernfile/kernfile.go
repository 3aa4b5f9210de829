// Package kernfile reads the kernel's pseudo-files that the observer reads
// again and again (a workload's cgroup files every sample, a run cgroup's
// OOM state ten times a second). Each is kept open and read from offset 0
// with pread(2): the kernel generates a seq_file afresh for a read at 0, so
// a reading costs one or two system calls instead of an open, reads and a
// close. It also
// writes kernel files so that the kernel's answer to a write, EAGAIN
// included, comes back (WriteFile).
package kernfile

import (
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
)

// Set is the files one reader keeps open, by path. Not safe for concurrent
// use.
type Set struct {
	files map[key]*file
	buf   []byte
}

// key is a file's path: a directory and a name in it (ReadFileAt), or a
// whole path and no name (ReadFile).
type key struct{ dir, name string }

func (k key) path() string {
	switch {
	case k.name == "":
		return k.dir
	case strings.HasSuffix(k.dir, "/"):
		return k.dir + k.name
	}
	return k.dir + "/" + k.name
}

type file struct {
	fd   int
	read bool // since the last Sweep
}

// maxSize bounds a file's reading, well above the largest cgroup file read
// here, memory.stat (bench/README.md, Where the defaults come from).
const maxSize = 64 << 10

// ReadFile returns the file's content, read afresh. The slice is valid until
// the next ReadFile on the Set. A file whose reading fails (its cgroup or
// process gone) is closed and opened again once, so a path that now names
// another cgroup or process is read, as os.ReadFile would.
func (s *Set) ReadFile(path string) ([]byte, error) { return s.readFile(key{path, ""}) }

// ReadFileAt is ReadFile of the file name in the directory dir, without
// the path made at each reading: a reader of many files in a few
// directories (a workload's cgroup files) keeps those for the next.
func (s *Set) ReadFileAt(dir, name string) ([]byte, error) { return s.readFile(key{dir, name}) }

func (s *Set) readFile(k key) ([]byte, error) {
	if s.files == nil {
		s.files = map[key]*file{}
	}
	f, kept := s.files[k]
	if kept {
		if b, err := s.read(f.fd); err == nil {
			f.read = true
			return b, nil
		}
		s.drop(k)
	}
	path := k.path()
	fd, err := open(path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	b, err := s.read(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	s.files[k] = &file{fd: fd, read: true}
	return b, nil
}

// read preads fd from 0 to its end into the Set's buffer.
func (s *Set) read(fd int) ([]byte, error) {
	if s.buf == nil {
		s.buf = make([]byte, 4096)
	}
	n := 0
	for {
		if n == len(s.buf) {
			if len(s.buf) >= maxSize {
				return nil, errors.New("larger than 64 KiB")
			}
			s.buf = append(s.buf, make([]byte, len(s.buf))...)
		}
		m, err := syscall.Pread(fd, s.buf[n:], int64(n))
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, err
		case m == 0:
			return s.buf[:n], nil
		}
		n += m
	}
}

// Sweep closes every file not read since the last Sweep: a reader that
// sweeps once a round keeps open only what it still reads.
func (s *Set) Sweep() {
	for k, f := range s.files {
		if !f.read {
			s.drop(k)
			continue
		}
		f.read = false
	}
}

// Len is how many files are open.
func (s *Set) Len() int { return len(s.files) }

// Close closes every file.
func (s *Set) Close() {
	for k := range s.files {
		s.drop(k)
	}
}

func (s *Set) drop(k key) {
	syscall.Close(s.files[k].fd)
	delete(s.files, k)
}

func open(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// WriteFile writes data to a kernel file in one write(2) on a blocking
// descriptor, and returns the kernel's answer to that write, EAGAIN
// included. os.WriteFile cannot be trusted with a cgroup file: kernfs files
// poll, so package os puts them in non-blocking mode and its poller reads an
// EAGAIN as "try again once writable", an event kernfs never sends. So a
// memory.reclaim that made no progress (EAGAIN, Linux 6.1 under a slow swap
// device) parked its writer for good.
func WriteFile(path string, data []byte) error {
	var fd int
	var err error
	for {
		if fd, err = syscall.Open(path, syscall.O_WRONLY|syscall.O_CLOEXEC, 0); err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	n, err := syscall.Write(fd, data)
	switch {
	case err != nil:
		return &os.PathError{Op: "write", Path: path, Err: err}
	case n < len(data):
		return &os.PathError{Op: "write", Path: path, Err: io.ErrShortWrite}
	}
	return nil
}
