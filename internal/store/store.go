// Package store keeps what outlives a sample: run records and their sample
// tables under --data.dir. Every file is written whole to a temporary file
// and renamed into place, so a crash leaves the old version or the new one,
// never half of either.
package store

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	// top and runs are the directory and its runs/, open for writing (see
	// package outdir); nil when the directory was opened to read only.
	top, runs *outdir.Dir
	// heavy bounds the work whose memory grows with a record (decoding
	// one, encoding one): a few at a time, whoever asks.
	heavy chan struct{}

	mu sync.Mutex
	// summaries are the records read so far, by id, each with the
	// version of the file it was read from (see summary.go).
	summaries map[string]cachedSummary
}

// heavySlots is how many records may be decoded or encoded at once: each
// holds up to a few times MaxRecordBytes.
const heavySlots = 2

func newDir(path string, top, runs *outdir.Dir) *Dir {
	return &Dir{path: path, top: top, runs: runs, heavy: make(chan struct{}, heavySlots), summaries: map[string]cachedSummary{}}
}

// Open makes the data directory if needed and opens it for writing. The
// directory must be the caller's own (see package outdir).
func Open(path string) (*Dir, error) {
	if path == "" {
		return nil, errors.New("--data.dir is empty: give a directory for run records")
	}
	top, err := outdir.Open(path, 0o750)
	if err != nil {
		return nil, fmt.Errorf("--data.dir=%q: %w", path, err)
	}
	runs, err := top.Sub("runs", 0o750)
	if err != nil {
		top.Close()
		return nil, fmt.Errorf("--data.dir=%q: %w", path, err)
	}
	return newDir(path, top, runs), nil
}

// ClearTemp removes the temporary files an interrupted write left: for the
// one process that holds the directory (runner.New), whose own writes in
// progress they cannot be.
func (d *Dir) ClearTemp() {
	if d.runs == nil {
		return
	}
	_ = filepath.WalkDir(d.runs.Path(), func(p string, de fs.DirEntry, err error) error {
		if err == nil && !de.IsDir() && strings.HasPrefix(de.Name(), outdir.TempPrefix) {
			_ = os.Remove(p)
		}
		return nil
	})
}

// Scratch makes (if needed) the data directory's scratch/, where backing=file
// consumers keep their files, and returns its path.
func (d *Dir) Scratch() (string, error) {
	if d.top == nil {
		return "", errReadOnly
	}
	s, err := d.top.Sub("scratch", 0o700)
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
	fi, err := os.Lstat(filepath.Join(path, "runs"))
	if err == nil && fi.Mode()&os.ModeSymlink != 0 {
		// As the writer refuses it (package outdir): a link planted there
		// would have readers take another directory's files for runs.
		return nil, fmt.Errorf("%s: runs/ is a symbolic link, and thrashscope never reads or writes through one: give the directory that holds the real runs/", path)
	}
	if err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s holds no runs/ directory: give the observer's --data.dir (default /var/lib/thrashscope) or loadgen run's --out", path)
	}
	return newDir(path, nil, nil), nil
}

// Data is the directory open for writing, for the files a run keeps
// beside its records (the settings' journal); nil when opened to read.
func (d *Dir) Data() *outdir.Dir { return d.top }

// Path is the data directory.
func (d *Dir) Path() string { return d.path }

// SaveRecord writes a run record atomically.
func (d *Dir) SaveRecord(rec run.Record) error {
	if rec.Consumers == nil {
		rec.Consumers = []run.ConsumerRecord{} // the API's shape, so the file can be sent as it is
	}
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
	b, err := d.ReadFile(id, RecordFile)
	if err != nil {
		return run.Record{}, err
	}
	return parseRecord(id, b)
}

// parseRecord decodes and validates the record file of run id.
func parseRecord(id string, b []byte) (run.Record, error) {
	var rec run.Record
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
		return corruptRecord(id, err), nil
	}
	return rec, nil
}

// corruptRecord is how a record that cannot be read is listed.
func corruptRecord(id string, err error) run.Record {
	return run.Record{ID: id, State: run.StateCorrupt, Consumers: []run.ConsumerRecord{},
		Reason: err.Error() + "; thrashscope leaves it alone: restore or remove " + filepath.Join("runs", id)}
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
	var b bytes.Buffer
	if err := d.Copy(context.Background(), id, name, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Open opens one of a run's files as ReadFile reads it, to be read a
// buffer at a time; the caller closes it.
func (d *Dir) Open(id, name string) (io.ReadCloser, error) {
	r, err := d.openTable(id, name)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Copy writes one of a run's files to w as ReadFile reads it, a buffer at a
// time: a table of tens of megabytes is streamed, not held.
func (d *Dir) Copy(ctx context.Context, id, name string, w io.Writer) error {
	r, err := d.openTable(id, name)
	if err != nil {
		return err
	}
	defer r.Close()
	return copyUntilDone(ctx, w, r)
}

// limitedReader is a run's file open for reading, held to its limit.
type limitedReader struct {
	io.Reader
	close func() error
	limit int64
	n     int64
	what  string
}

func (l *limitedReader) Read(p []byte) (int, error) {
	n, err := l.Reader.Read(p)
	l.n += int64(n)
	switch {
	case l.n > l.limit:
		return n, fmt.Errorf("%s holds more than the %d bytes a run writes: not thrashscope's; remove it", l.what, l.limit)
	case err != nil && err != io.EOF:
		return n, fmt.Errorf("reading %s: %w; remove it", l.what, err)
	}
	return n, err
}

func (l *limitedReader) Close() error { return l.close() }

// openTable opens one of a run's files, or its gzipped form (a table only).
func (d *Dir) openTable(id, name string) (*limitedReader, error) {
	if !validID.MatchString(id) {
		return nil, fmt.Errorf("%w: run id %q: want 1 to 64 of a-z, 0-9 and -", ErrNotFound, strictjson.Clip(id))
	}
	limit := int64(MaxTableBytes)
	if name == RecordFile {
		limit = MaxRecordBytes
	}
	f, _, err := d.openFile(id, name, limit)
	if err == nil {
		return &limitedReader{Reader: f, close: f.Close, limit: limit, what: filepath.Join("runs", id, name)}, nil
	}
	if !errors.Is(err, ErrNotFound) || name == RecordFile {
		return nil, err
	}
	z, _, zerr := d.openFile(id, name+".gz", limit)
	if errors.Is(zerr, ErrNotFound) {
		return nil, err
	}
	if zerr != nil {
		return nil, zerr
	}
	rel := filepath.Join("runs", id, name+".gz")
	zr, zerr := gzip.NewReader(z)
	if zerr != nil {
		z.Close()
		return nil, fmt.Errorf("reading %s: %w; it is not a gzip file: remove it", rel, zerr)
	}
	return &limitedReader{Reader: zr, close: z.Close, limit: limit, what: rel}, nil
}

// copyUntilDone copies r to w, a buffer at a time, until r ends, w or r
// fails, or ctx is done (the client went away).
func copyUntilDone(ctx context.Context, w io.Writer, r io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
		}
		switch {
		case rerr == io.EOF:
			return nil
		case rerr != nil:
			return rerr
		}
	}
}

// fileKey is one version of a file: a file rewritten (renamed over) has
// another inode, one changed in place another size or time.
type fileKey struct {
	dev, ino uint64
	size     int64
	mtime    int64
}

// openFile opens runs/<id>/<name>, a regular file of at most limit bytes
// reached through no link, and says which version it is.
func (d *Dir) openFile(id, name string, limit int64) (*os.File, fileKey, error) {
	rel := filepath.Join("runs", id, name)
	f, err := openNoFollow(filepath.Join(d.path, "runs"), id, name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fileKey{}, fmt.Errorf("%w: %s has no %s", ErrNotFound, id, name)
	case errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENOTDIR):
		return nil, fileKey{}, fmt.Errorf("%s is a symbolic link or not a file: thrashscope reads only regular files in its data dir; remove it", rel)
	case err != nil:
		return nil, fileKey{}, fmt.Errorf("reading %s: %w", rel, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fileKey{}, fmt.Errorf("reading %s: %w", rel, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fileKey{}, fmt.Errorf("%s is not a regular file (%s): thrashscope reads only regular files in its data dir; remove it", rel, fi.Mode().Type())
	}
	if fi.Size() > limit {
		f.Close()
		return nil, fileKey{}, fmt.Errorf("%s holds %d bytes, more than the %d a run writes: not thrashscope's; remove it", rel, fi.Size(), limit)
	}
	key := fileKey{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		key.dev, key.ino = st.Dev, st.Ino
	}
	return f, key, nil
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
	ids, err := d.ids() // newest first
	var removed []string
	for i, id := range ids {
		if i < keep {
			continue
		}
		sum, serr := d.Summary(context.Background(), id)
		if serr != nil || run.Active(sum.State) || sum.State == run.StateCorrupt {
			continue
		}
		if derr := d.Remove(id); derr != nil {
			err = errors.Join(err, derr)
			continue
		}
		removed = append(removed, id)
	}
	return removed, err
}
