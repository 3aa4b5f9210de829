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

// HistoryFile is the history's file in the data dir: one diagnosis a line,
// oldest first, appended as each closes and rewritten with the last
// HistoryLen once it holds twice as many.
const HistoryFile = "diagnoses.jsonl"

// oldHistoryFile is the history as one JSON array, as it was first kept:
// read once, rewritten as HistoryFile, removed.
const oldHistoryFile = "diagnoses.json"

// maxHistoryBytes bounds what is read back: 2×HistoryLen diagnoses of a
// few KiB each, with room; a file larger than that is not the history's.
const maxHistoryBytes = 8 << 20

// History is the last closed diagnoses, oldest first, kept in a file of
// the data dir so that they survive a restart.
type History struct {
	dir  string
	list []Diagnosis
	// lines is how many diagnoses the file holds, up to 2×HistoryLen.
	lines int
}

// OpenHistory reads the history in dir, empty when there is none yet. The
// file is read only as a regular file of at most maxHistoryBytes, through
// no link; anything else is an error naming the file and the fix. A last
// line cut short (the host went down mid-append) is dropped, and the file
// rewritten without it.
func OpenHistory(dir string) (*History, error) {
	h := &History{dir: dir}
	path := filepath.Join(dir, HistoryFile)
	b, err := readOwn(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := h.migrate(); err != nil {
			return nil, err
		}
		return h, nil
	}
	if err != nil {
		return nil, err
	}
	torn := len(b) > 0 && b[len(b)-1] != '\n'
	if torn {
		b = b[:bytes.LastIndexByte(b, '\n')+1]
	}
	for n := 1; len(b) > 0; n++ {
		line, rest, _ := bytes.Cut(b, []byte("\n"))
		b = rest
		var d Diagnosis
		if err := strictJSON(line, &d); err != nil {
			return nil, fmt.Errorf("the diagnoses' history %s, line %d: %w: remove it (it is remade, without the diagnoses it held)", path, n, err)
		}
		h.list = append(h.list, d)
	}
	h.lines = len(h.list)
	if len(h.list) > HistoryLen {
		h.list = h.list[len(h.list)-HistoryLen:]
	}
	if torn {
		if err := h.rewrite(); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// migrate reads the history kept as one JSON array, if there is one, and
// rewrites it as lines.
func (h *History) migrate() error {
	old := filepath.Join(h.dir, oldHistoryFile)
	b, err := readOwn(old)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = strictJSON(b, &h.list)
	}
	if err != nil {
		return fmt.Errorf("the diagnoses' history %s: %w: remove it (it is remade, without the diagnoses it held)", old, err)
	}
	if len(h.list) > HistoryLen {
		h.list = h.list[len(h.list)-HistoryLen:]
	}
	if err := h.rewrite(); err != nil {
		return err
	}
	return os.Remove(old)
}

// readOwn reads path as a regular file of at most maxHistoryBytes, opened
// through no link and without blocking on a FIFO.
func readOwn(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("opening the diagnoses' history %s: %w (remove it if it is a link; it is remade)", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > maxHistoryBytes {
		return nil, fmt.Errorf("the diagnoses' history %s is not a regular file of at most %d bytes: remove it (it is remade)", path, maxHistoryBytes)
	}
	return io.ReadAll(io.LimitReader(f, maxHistoryBytes+1))
}

func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one value")
	}
	return nil
}

// List is the history, oldest first.
func (h *History) List() []Diagnosis { return append([]Diagnosis(nil), h.list...) }

// Add keeps the closed diagnoses ds, dropping the oldest past HistoryLen,
// and saves them: appended to the file as lines (not synced: a restart of
// the daemon keeps what it wrote; a host that goes down may lose the last
// seconds, and a line cut short is dropped at the next start). Every
// HistoryLen closes the file is rewritten with the last HistoryLen.
// Appending costs one write a close; writing the whole history each time
// was a sixth of the diagnoses' CPU while a run's 25 groups closed.
func (h *History) Add(ds ...Diagnosis) error {
	if len(ds) == 0 {
		return nil
	}
	h.list = append(h.list, ds...)
	if len(h.list) > HistoryLen {
		h.list = append([]Diagnosis(nil), h.list[len(h.list)-HistoryLen:]...)
	}
	if h.lines+len(ds) > 2*HistoryLen {
		return h.rewrite()
	}
	b, err := lines(ds)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(h.dir, HistoryFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("saving the diagnoses' history: %w", err)
	}
	_, werr := f.Write(b)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("saving the diagnoses' history: %w", err)
	}
	h.lines += len(ds)
	return nil
}

// rewrite writes the kept diagnoses whole to a temporary file beside the
// history and renames it over it, so a crash leaves the old file or the
// new one.
func (h *History) rewrite() error {
	b, err := lines(h.list)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(h.dir, "."+HistoryFile+".*")
	if err != nil {
		return fmt.Errorf("saving the diagnoses' history: %w", err)
	}
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("saving the diagnoses' history: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(h.dir, HistoryFile)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("saving the diagnoses' history: %w", err)
	}
	h.lines = len(h.list)
	return nil
}

// lines is ds as JSON, one a line.
func lines(ds []Diagnosis) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range ds {
		if err := enc.Encode(&ds[i]); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}
