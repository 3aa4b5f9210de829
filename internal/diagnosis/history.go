package diagnosis

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// HistoryLen is how many closed diagnoses are kept.
const HistoryLen = 100

// HistoryFile is the history's file in the data dir.
const HistoryFile = "diagnoses.json"

// maxHistoryBytes bounds what is read back: HistoryLen diagnoses of a few
// KiB each, with room; a file larger than that is not the history's.
const maxHistoryBytes = 8 << 20

// History is the last closed diagnoses, oldest first, kept in a file of
// the data dir so that they survive a restart.
type History struct {
	path string
	list []Diagnosis
}

// OpenHistory reads the history in dir, empty when there is none yet. The
// file is read only as a regular file of at most maxHistoryBytes, through
// no link; anything else is an error naming the file and the fix.
func OpenHistory(dir string) (*History, error) {
	h := &History{path: filepath.Join(dir, HistoryFile)}
	f, err := os.OpenFile(h.path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening the diagnoses' history %s: %w (remove it if it is a link; it is remade)", h.path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > maxHistoryBytes {
		return nil, fmt.Errorf("the diagnoses' history %s is not a regular file of at most %d bytes: remove it (it is remade)", h.path, maxHistoryBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxHistoryBytes+1))
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h.list); err != nil {
		return nil, fmt.Errorf("the diagnoses' history %s: %w: remove it (it is remade, without the diagnoses it held)", h.path, err)
	}
	if len(h.list) > HistoryLen {
		h.list = h.list[len(h.list)-HistoryLen:]
	}
	return h, nil
}

// List is the history, oldest first.
func (h *History) List() []Diagnosis { return append([]Diagnosis(nil), h.list...) }

// Add keeps the closed diagnoses ds, dropping the oldest past HistoryLen,
// and saves the history: written whole to a temporary file beside it and
// renamed over it, so a crash leaves the old history or the new one.
func (h *History) Add(ds ...Diagnosis) error {
	if len(ds) == 0 {
		return nil
	}
	h.list = append(h.list, ds...)
	if len(h.list) > HistoryLen {
		h.list = append([]Diagnosis(nil), h.list[len(h.list)-HistoryLen:]...)
	}
	b, err := json.Marshal(h.list)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(h.path), "."+HistoryFile+".*")
	if err != nil {
		return fmt.Errorf("saving the diagnoses' history: %w", err)
	}
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("saving the diagnoses' history: %w", err)
	}
	if err := os.Rename(tmp.Name(), h.path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("saving the diagnoses' history: %w", err)
	}
	return nil
}
