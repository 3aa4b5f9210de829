// Package store keeps what outlives a sample: run records and their sample
// tables under --data.dir. Every file is written whole to a temporary file
// and renamed into place, so a crash leaves the old version or the new one,
// never half of either.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/thrashscope/thrashscope/internal/loadgen"
)

// File names inside a run's directory.
const (
	RecordFile  = "record.json"
	SamplesFile = "samples.csv"
	FillFile    = "fill.csv"
)

// validID keeps ids to what cannot escape the runs directory.
var validID = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

// Dir is a data directory.
type Dir struct {
	path string
}

// Open makes the data directory if needed and clears temporary files that
// an interrupted write left.
func Open(path string) (*Dir, error) {
	if path == "" {
		return nil, errors.New("--data.dir is empty: give a directory for run records")
	}
	runs := filepath.Join(path, "runs")
	if err := os.MkdirAll(runs, 0o750); err != nil {
		return nil, fmt.Errorf("--data.dir=%q: %w", path, err)
	}
	_ = filepath.WalkDir(runs, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), ".tmp-") {
			_ = os.Remove(p)
		}
		return nil
	})
	return &Dir{path: path}, nil
}

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

// RunDir is where one run's files live.
func (d *Dir) RunDir(id string) (string, error) {
	if !validID.MatchString(id) {
		return "", fmt.Errorf("run id %q: want 1 to 64 of a-z, 0-9 and -", id)
	}
	return filepath.Join(d.path, "runs", id), nil
}

// SaveRecord writes a run record atomically.
func (d *Dir) SaveRecord(rec loadgen.Record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding run record %s: %w", rec.ID, err)
	}
	return d.WriteFile(rec.ID, RecordFile, append(b, '\n'))
}

// LoadRecord reads one run record; loadgen.ErrNotFound when there is none.
func (d *Dir) LoadRecord(id string) (loadgen.Record, error) {
	var rec loadgen.Record
	b, err := d.ReadFile(id, RecordFile)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("run record %s is corrupt: %w", id, err)
	}
	return rec, nil
}

// Records reads every run record, newest first. A corrupt one is skipped
// and reported in the error, so one bad file does not hide the rest.
func (d *Dir) Records() ([]loadgen.Record, error) {
	ents, err := os.ReadDir(filepath.Join(d.path, "runs"))
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	var recs []loadgen.Record
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !validID.MatchString(e.Name()) {
			continue
		}
		rec, err := d.LoadRecord(e.Name())
		switch {
		case errors.Is(err, loadgen.ErrNotFound):
			// a run directory whose record was never written
		case err != nil:
			errs = append(errs, err)
		default:
			recs = append(recs, rec)
		}
	}
	slices.SortFunc(recs, func(a, b loadgen.Record) int {
		if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return recs, errors.Join(errs...)
}

// WriteFile writes one of a run's files atomically: a temporary file in the
// same directory, synced, then renamed over the old one.
func (d *Dir) WriteFile(id, name string, data []byte) error {
	dir, err := d.RunDir(id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-"+name+"-")
	if err != nil {
		return fmt.Errorf("writing %s of run %s: %w", name, id, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("writing %s of run %s: %w", name, id, err)
	}
	// The rename is durable once the directory is.
	if df, err := os.Open(dir); err == nil {
		_ = df.Sync()
		df.Close()
	}
	return nil
}

// ReadFile reads one of a run's files; loadgen.ErrNotFound when missing.
func (d *Dir) ReadFile(id, name string) ([]byte, error) {
	dir, err := d.RunDir(id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", loadgen.ErrNotFound, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s", loadgen.ErrNotFound, id, name)
	}
	return b, err
}

// Prune removes the oldest ended runs beyond keep, so a stream of requests
// cannot fill the disk. Active runs are never removed.
func (d *Dir) Prune(keep int) ([]string, error) {
	recs, err := d.Records()
	var removed []string
	for i, rec := range recs { // newest first
		if i < keep || loadgen.Active(rec.State) {
			continue
		}
		dir, derr := d.RunDir(rec.ID)
		if derr == nil {
			derr = os.RemoveAll(dir)
		}
		if derr != nil {
			err = errors.Join(err, derr)
			continue
		}
		removed = append(removed, rec.ID)
	}
	return removed, err
}
