// Package settings holds the kernel's memory settings a run can be put
// under, and the journal that guarantees a host-wide one is given back.
//
// A host-wide setting (a sysctl, a module's parameter) outlives the process
// that changed it. So its value before is written to a journal in the data
// directory, synced, before the kernel file is written; the run's end
// restores every value in reverse and removes the journal; and a process
// that died with a journal behind it (a kill -9) has it restored by the next
// one at its start (Recover).
package settings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/thrashscope/thrashscope/internal/kernfile"
	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// JournalFile is the journal's name in the data directory.
const JournalFile = "settings-journal.json"

// maxJournalBytes bounds a journal read back: a handful of files and values.
const maxJournalBytes = 64 << 10

// Change is one kernel file a run changed, its value before and the one
// written; or a zram device the run made swap (Swapon), which the restore
// takes off swap and resets.
type Change struct {
	File   string `json:"file,omitempty"`
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
	Swapon string `json:"swapon,omitempty"`
}

// Dir is the data directory the journal is kept in (an *outdir.Dir: never
// written through a link, each file replaced whole and synced).
type Dir interface {
	Path() string
	WriteFile(name string, data []byte, perm fs.FileMode) error
	ReadFile(name string, max int64) ([]byte, error)
	RemoveAll(name string) error
}

// File reads and writes the kernel's files, named by their paths on the
// host, and takes a swap area off (Host is the host's).
type File interface {
	Read(path string) (string, error)
	Write(path, value string) error
	SwapOff(node string) error
}

// zramNode is what a journal's Swapon may name.
var zramNode = regexp.MustCompile(`^/dev/zram[0-9]{1,4}$`)

// Journal is one run's host-wide changes, kept in the data directory until
// every one is restored.
type Journal struct {
	dir   Dir
	files File
	Run   string   `json:"run"`
	Done  []Change `json:"changes"`
	// applied is the run's settings being applied, for Finish and Sample.
	applied *applier
	// lock holds the host's settings for this run (hostLock).
	lock     io.Closer
	sampleMu sync.Mutex
}

// Begin starts run's journal in dir. It refuses while a journal of another
// run, not yet restored, is there: one run changes the host at a time.
func Begin(dir Dir, files File, run string) (*Journal, error) {
	old, err := read(dir)
	switch {
	case err != nil:
		return nil, err
	case old != nil:
		return nil, fmt.Errorf("run %s's host settings are still to be restored (%s): restart the observer, which restores them first", strictjson.Clip(old.Run), dir.Path()+"/"+JournalFile)
	}
	return &Journal{dir: dir, files: files, Run: run}, nil
}

// Lock takes the host's settings for the journal's run, so that no other
// thrashscope process changes them until it is restored.
func (j *Journal) Lock() error {
	l, err := hostLock()
	if err != nil {
		return err
	}
	j.lock = l
	return nil
}

// swapon journals that node is about to be made swap, before it is.
func (j *Journal) swapon(node string) error {
	j.Done = append(j.Done, Change{Swapon: node})
	if err := j.save(); err != nil {
		j.Done = j.Done[:len(j.Done)-1]
		return fmt.Errorf("journalling %s before making it swap: %w", node, err)
	}
	return nil
}

// Set writes value to the kernel file path, having journalled its value
// before on disk. A value the file already holds is left as it is, and not
// journalled.
func (j *Journal) Set(path, value string) error {
	before, err := j.files.Read(path)
	if err != nil {
		return err
	}
	if before == value {
		return nil
	}
	j.Done = append(j.Done, Change{File: path, Before: before, After: value})
	if err := j.save(); err != nil {
		j.Done = j.Done[:len(j.Done)-1]
		return fmt.Errorf("journalling %s before changing it: %w", path, err)
	}
	if err := j.files.Write(path, value); err != nil {
		// Nothing changed, as far as the kernel said: the entry stays
		// journalled all the same, and restoring it writes the value the
		// file held.
		return fmt.Errorf("writing %q to %s: %w", value, path, err)
	}
	return nil
}

// Restore writes every value back, the last change first, and removes the
// journal once all are back. A value that cannot be written back leaves the
// journal in place, for the next start to try again, and is returned.
func (j *Journal) Restore() error {
	var errs []error
	for _, c := range slices.Backward(j.Done) {
		if c.Swapon != "" {
			errs = append(errs, j.resetZram(c.Swapon))
			continue
		}
		if err := j.files.Write(c.File, c.Before); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s to %q: %w", c.File, c.Before, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	j.Done = nil
	err := j.dir.RemoveAll(JournalFile)
	if err == nil && j.lock != nil {
		j.lock.Close()
		j.lock = nil
	}
	return err
}

// resetZram takes a zram device off swap and resets it: its memory freed,
// its disk size 0, free again.
func (j *Journal) resetZram(node string) error {
	if err := j.files.SwapOff(node); err != nil {
		return err
	}
	reset := "/sys/block/" + strings.TrimPrefix(node, "/dev/") + "/reset"
	if err := j.files.Write(reset, "1"); err != nil {
		return fmt.Errorf("resetting %s: %w", node, err)
	}
	return nil
}

// Recover restores what a journal left in dir holds: the changes of a run
// whose process died before it could. It returns them, nil when there was
// no journal.
func Recover(dir Dir, files File) ([]Change, error) {
	j, err := read(dir)
	if err != nil || j == nil {
		return nil, err
	}
	j.dir, j.files = dir, files
	done := slices.Clone(j.Done)
	return done, j.Restore()
}

// save writes the journal whole, synced: a crash leaves the old one or the
// new one.
func (j *Journal) save() error {
	b, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	return j.dir.WriteFile(JournalFile, b, 0o600)
}

// read is the journal in dir, nil when there is none.
func read(dir Dir) (*Journal, error) {
	b, err := dir.ReadFile(JournalFile, maxJournalBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var j Journal
	if err := strictjson.Check(b); err != nil {
		return nil, fmt.Errorf("%s/%s: %w; it names kernel files to restore: restore them by hand, then remove it", dir.Path(), JournalFile, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return nil, fmt.Errorf("%s/%s: %w; it names kernel files to restore: restore them by hand, then remove it", dir.Path(), JournalFile, err)
	}
	for _, c := range j.Done {
		if c.Swapon != "" && zramNode.MatchString(c.Swapon) && c.File == "" {
			continue
		}
		if !strings.HasPrefix(c.File, "/proc/sys/") && !strings.HasPrefix(c.File, "/sys/") {
			return nil, fmt.Errorf("%s/%s names %q, not a kernel file: thrashscope wrote no such journal; remove it", dir.Path(), JournalFile, strictjson.Clip(c.File))
		}
	}
	return &j, nil
}

// Host is the host's kernel files, under Root ("" is /): a value read is
// the file's first line, and a write is one write(2), whose error is the
// kernel's answer.
type Host struct{ Root string }

// Read reads path's value.
func (h Host) Read(path string) (string, error) {
	b, err := os.ReadFile(filepath.Join(h.Root, path))
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return line, nil
}

// Write writes value to path.
func (h Host) Write(path, value string) error {
	return kernfile.WriteFile(filepath.Join(h.Root, path), []byte(value))
}

// SwapOff takes node off swap; one that is not swap is no error.
func (h Host) SwapOff(node string) error {
	return swapoff(filepath.Join(h.Root, node))
}
