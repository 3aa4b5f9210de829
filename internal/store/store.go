// Package store keeps what outlives a sample: run records and their sample
// tables under --data.dir. Every file is written whole to a temporary file
// and renamed into place, so a crash leaves the old version or the new one,
// never half of either.
package store

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/outdir"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// File names inside a run's directory.
const (
	RecordFile  = "record.json"
	SamplesFile = "samples.csv"
	FillFile    = "fill.csv"
)

// The most a data-dir file may hold when read back. A run writes far less
// (its tables are bounded: MaxProcessRows, 4 h of samples); anything bigger
// was not written by thrashscope and is refused before it is read.
const (
	MaxRecordBytes = 8 << 20
	MaxTableBytes  = 64 << 20
)

// validID keeps ids to what cannot escape the runs directory.
var validID = run.IDPattern

// Dir is a data directory.
type Dir struct {
	path string
	// runs is runs/, open for writing (see package outdir); nil when the
	// directory was opened to read only.
	runs *outdir.Dir
}

// Open makes the data directory if needed, opens it for writing, and
// clears temporary files that an interrupted write left. The directory must
// be the caller's own (see package outdir).
func Open(path string) (*Dir, error) {
	if path == "" {
		return nil, errors.New("--data.dir is empty: give a directory for run records")
	}
	top, err := outdir.Open(path, 0o750)
	if err != nil {
		return nil, fmt.Errorf("--data.dir=%q: %w", path, err)
	}
	defer top.Close()
	runs, err := top.Sub("runs", 0o750)
	if err != nil {
		return nil, fmt.Errorf("--data.dir=%q: %w", path, err)
	}
	_ = filepath.WalkDir(runs.Path(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), outdir.TempPrefix) {
			_ = os.Remove(p)
		}
		return nil
	})
	return &Dir{path: path, runs: runs}, nil
}

// Scratch makes (if needed) the data directory's scratch/, where backing=file
// consumers keep their files, and returns its path.
func (d *Dir) Scratch() (string, error) {
	if d.runs == nil {
		return "", errReadOnly
	}
	top, err := outdir.Open(d.path, 0o750)
	if err != nil {
		return "", err
	}
	defer top.Close()
	s, err := top.Sub("scratch", 0o700)
	if err != nil {
		return "", err
	}
	defer s.Close()
	return s.Path(), nil
}

var errReadOnly = errors.New("the data directory was opened to read only")

// OpenExisting opens a data directory only to read it: nothing is made or
// cleared, so a reader never races the observer writing beside it.
func OpenExisting(path string) (*Dir, error) {
	if path == "" {
		return nil, errors.New("the data directory is empty: give the observer's --data.dir or loadgen run's --out")
	}
	fi, err := os.Stat(filepath.Join(path, "runs"))
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s holds no runs/ directory: give the observer's --data.dir (default /var/lib/thrashscope) or loadgen run's --out", path)
	}
	return &Dir{path: path}, nil
}

// Path is the data directory.
func (d *Dir) Path() string { return d.path }

// SaveRecord writes a run record atomically.
func (d *Dir) SaveRecord(rec run.Record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding run record %s: %w", rec.ID, err)
	}
	return d.WriteFile(rec.ID, RecordFile, append(b, '\n'))
}

// ErrNotFound: no run record, table or file by that name. It is a
// run.ErrNotFound too, which the API answers with 404.
var ErrNotFound = fmt.Errorf("%w in the data directory", run.ErrNotFound)

// LoadRecord reads one run record; ErrNotFound when there is none.
// A record whose id is not the directory's is refused: every path made from
// the record (a report's output, the run's files) uses the id, and a record
// saying "../x" must not lead anywhere.
func (d *Dir) LoadRecord(id string) (run.Record, error) {
	var rec run.Record
	b, err := d.ReadFile(id, RecordFile)
	if err != nil {
		return rec, err
	}
	if err := decodeRecord(b, &rec); err != nil {
		return run.Record{}, fmt.Errorf("run record %s is corrupt: %w", id, err)
	}
	if rec.ID != id {
		return run.Record{}, fmt.Errorf("run record %s is corrupt: it says its id is %q", id, strictjson.Clip(rec.ID))
	}
	rec.Normalize()
	if err := rec.Validate(); err != nil {
		return run.Record{}, fmt.Errorf("run record %s is corrupt: %w", id, err)
	}
	return rec, nil
}

// Record is LoadRecord for a listing: a record that cannot be read comes
// back as run.StateCorrupt with the reason, not as an error; only a
// missing one is (ErrNotFound).
func (d *Dir) Record(id string) (run.Record, error) {
	rec, err := d.LoadRecord(id)
	switch {
	case errors.Is(err, ErrNotFound):
		return rec, err
	case err != nil:
		return run.Record{ID: id, State: run.StateCorrupt,
			Reason: err.Error() + "; thrashscope leaves it alone: restore or remove " + filepath.Join("runs", id)}, nil
	}
	return rec, nil
}

// Records reads every run record, newest first. A record that cannot be
// read is listed as run.StateCorrupt with the reason, after the others,
// so one bad file neither hides the rest nor goes unseen.
func (d *Dir) Records() ([]run.Record, error) {
	ents, err := os.ReadDir(filepath.Join(d.path, "runs"))
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	var recs, corrupt []run.Record
	for _, e := range ents {
		if !validID.MatchString(e.Name()) || e.Type()&fs.ModeSymlink != 0 || !e.IsDir() {
			continue
		}
		rec, err := d.Record(e.Name())
		switch {
		case errors.Is(err, ErrNotFound):
			// a run directory whose record was never written
		case rec.State == run.StateCorrupt:
			corrupt = append(corrupt, rec)
		default:
			recs = append(recs, rec)
		}
	}
	slices.SortFunc(recs, func(a, b run.Record) int {
		if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return append(recs, corrupt...), nil
}

// WriteFile writes one of a run's files atomically: a temporary file in the
// same directory, synced, then renamed over the old one, never through a
// link (see package outdir).
func (d *Dir) WriteFile(id, name string, data []byte) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("run id %q: want 1 to 64 of a-z, 0-9 and -", strictjson.Clip(id))
	}
	if d.runs == nil {
		return errReadOnly
	}
	dir, err := d.runs.Sub(id, 0o750)
	if err != nil {
		return fmt.Errorf("writing %s of run %s: %w", name, id, err)
	}
	defer dir.Close()
	if err := dir.WriteFile(name, data, 0o600); err != nil {
		return fmt.Errorf("writing %s of run %s: %w", name, id, err)
	}
	return nil
}

// ReadFile reads one of a run's files; ErrNotFound when missing.
// It reads only a regular file, never through a symbolic link (the run's
// directory or the file), and at most MaxRecordBytes of a record or
// MaxTableBytes of a table: the data dir is read as input, not trusted.
// A table kept gzipped (samples.csv.gz, as in the repository's
// docs/reproduction) is read when the plain file is not there, and its
// content is held to the same limit.
func (d *Dir) ReadFile(id, name string) ([]byte, error) {
	if !validID.MatchString(id) {
		return nil, fmt.Errorf("%w: run id %q: want 1 to 64 of a-z, 0-9 and -", ErrNotFound, strictjson.Clip(id))
	}
	limit := int64(MaxTableBytes)
	if name == RecordFile {
		return d.readFile(id, name, MaxRecordBytes)
	}
	b, err := d.readFile(id, name, limit)
	if !errors.Is(err, ErrNotFound) {
		return b, err
	}
	z, zerr := d.readFile(id, name+".gz", limit)
	if errors.Is(zerr, ErrNotFound) {
		return nil, err
	}
	if zerr != nil {
		return nil, zerr
	}
	rel := filepath.Join("runs", id, name+".gz")
	zr, zerr := gzip.NewReader(bytes.NewReader(z))
	if zerr != nil {
		return nil, fmt.Errorf("reading %s: %w; it is not a gzip file: remove it", rel, zerr)
	}
	b, zerr = io.ReadAll(io.LimitReader(zr, limit+1))
	if zerr != nil {
		return nil, fmt.Errorf("reading %s: %w; remove it", rel, zerr)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s holds more than the %d bytes a run writes: not thrashscope's; remove it", rel, limit)
	}
	return b, nil
}

func (d *Dir) readFile(id, name string, limit int64) ([]byte, error) {
	rel := filepath.Join("runs", id, name)
	f, err := openNoFollow(filepath.Join(d.path, "runs"), id, name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s has no %s", ErrNotFound, id, name)
	case errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENOTDIR):
		return nil, fmt.Errorf("%s is a symbolic link or not a file: thrashscope reads only regular files in its data dir; remove it", rel)
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", rel, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s): thrashscope reads only regular files in its data dir; remove it", rel, fi.Mode().Type())
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s holds %d bytes, more than the %d a run writes: not thrashscope's; remove it", rel, fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", rel, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s grew past %d bytes while read: not thrashscope's; remove it", rel, limit)
	}
	return b, nil
}

// openNoFollow opens runs/<id>/<name> for reading with O_NOFOLLOW on each
// step below runs/, so neither the run's directory nor the file can be a
// link to somewhere else. O_NONBLOCK keeps a FIFO planted there from
// blocking the open.
func openNoFollow(runs, id, name string) (*os.File, error) {
	const flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	dfd, err := unix.Open(filepath.Join(runs, id), flags|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: id, Err: err}
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, flags|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(runs, id, name)), nil
}

// decodeRecord reads a record strictly: one JSON object, each member once.
func decodeRecord(b []byte, rec *run.Record) error {
	return strictjson.Decode(b, rec)
}

// Remove deletes one run's directory and everything in it.
func (d *Dir) Remove(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("run id %q: want 1 to 64 of a-z, 0-9 and -", strictjson.Clip(id))
	}
	if d.runs == nil {
		return errReadOnly
	}
	return d.runs.RemoveAll(id)
}

// Prune removes the oldest ended runs beyond keep, so a stream of requests
// cannot fill the disk. Active runs are never removed, nor corrupt ones:
// those are for an operator to look at.
func (d *Dir) Prune(keep int) ([]string, error) {
	recs, err := d.Records()
	var removed []string
	for i, rec := range recs { // newest first
		if i < keep || run.Active(rec.State) || rec.State == run.StateCorrupt {
			continue
		}
		if derr := d.Remove(rec.ID); derr != nil {
			err = errors.Join(err, derr)
			continue
		}
		removed = append(removed, rec.ID)
	}
	return removed, err
}
