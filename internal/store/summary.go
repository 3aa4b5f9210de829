package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/thrashscope/thrashscope/internal/run"
)

// Listing runs and serving a record are what any local client may ask for,
// without a token, as often as it likes; a record can be megabytes (512
// consumers, 20,000 decisions). So a listing is of summaries, a page at a
// time; each record is decoded once per version of its file (its summary
// is kept, and whether the file may be sent as it is); a record is served
// by copying its file; and what must decode or encode a record waits for
// one of heavySlots, giving up when the client goes away.

// cachedSummary is a record's summary, as of one version of its file.
type cachedSummary struct {
	key fileKey
	sum run.Summary
	// asIs: the file is a valid record in the API's shape, to be sent as
	// it is.
	asIs bool
}

// maxSummaries bounds the summaries kept: the data dir keeps 100 runs.
const maxSummaries = 10_000

// MaxPageSize bounds a page of summaries.
const MaxPageSize = 500

// Heavy waits for one of the slots for work that grows with a record, and
// returns its release; an error when ctx is done first.
func (d *Dir) Heavy(ctx context.Context) (func(), error) {
	select {
	case d.heavy <- struct{}{}:
		return func() { <-d.heavy }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// EncodeJSON writes v as JSON to w in one of the heavy slots: an encoding
// is held whole in memory until it is written.
func (d *Dir) EncodeJSON(ctx context.Context, v any, w io.Writer) error {
	release, err := d.Heavy(ctx)
	if err != nil {
		return err
	}
	defer release()
	return json.NewEncoder(w).Encode(v)
}

// ids lists the run ids under runs/, newest first: an id starts with its
// run's start time, so its order is the runs'.
func (d *Dir) ids() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(d.path, "runs"))
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	ids := make([]string, 0, len(ents))
	for _, e := range ents {
		if validID.MatchString(e.Name()) && e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	slices.SortFunc(ids, func(a, b string) int { return strings.Compare(b, a) })
	return ids, nil
}

// Summaries is a page of the runs, newest first: at most n, those after
// the run id after ("" for the newest). next is the id to give as after
// for the page that follows, "" after the last. A record that cannot be
// read is listed corrupt, with the reason.
func (d *Dir) Summaries(ctx context.Context, after string, n int) (page []run.Summary, next string, err error) {
	ids, err := d.ids()
	if err != nil {
		return nil, "", err
	}
	d.forget(ids)
	i := 0
	if after != "" {
		i, _ = slices.BinarySearchFunc(ids, after, func(id, t string) int { return strings.Compare(t, id) })
		if i < len(ids) && ids[i] == after {
			i++
		}
	}
	end := min(i+n, len(ids))
	for _, id := range ids[i:end] {
		if err := ctx.Err(); err != nil {
			return nil, "", err // the client went away
		}
		sum, err := d.Summary(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			// a run directory whose record was never written
		case err != nil:
			return nil, "", err
		default:
			page = append(page, sum)
		}
	}
	if end < len(ids) {
		next = ids[end-1]
	}
	return page, next, nil
}

// Summary is one run's summary; ErrNotFound when it has no record, an error
// when ctx is done before its record could be read.
func (d *Dir) Summary(ctx context.Context, id string) (run.Summary, error) {
	c, _, err := d.read(ctx, id, false)
	return c.sum, err
}

// WriteRecord writes run id's record to w as the API sends it: the file
// itself when it is a valid record in that shape, else the record decoded
// and encoded again (a record of an older version), or, for one that cannot
// be read, the corrupt record that says why.
func (d *Dir) WriteRecord(ctx context.Context, id string, w io.Writer) error {
	c, f, err := d.read(ctx, id, true)
	if err != nil {
		return err
	}
	if f != nil {
		defer f.Close()
		return copyUntilDone(ctx, w, io.LimitReader(f, MaxRecordBytes))
	}
	if c.sum.State == run.StateCorrupt {
		return d.EncodeJSON(ctx, run.Record{ID: id, State: run.StateCorrupt, Reason: c.sum.Reason, Consumers: []run.ConsumerRecord{}}, w)
	}
	rec, err := d.LoadRecord(id)
	if err != nil {
		return err
	}
	if rec.Consumers == nil {
		rec.Consumers = []run.ConsumerRecord{}
	}
	return d.EncodeJSON(ctx, rec, w)
}

// read finds run id's summary, from the cache when its file has not changed
// since, else by decoding it (in a heavy slot). With open, it also returns
// the file, at its start, when it may be sent as it is.
func (d *Dir) read(ctx context.Context, id string, open bool) (cachedSummary, *os.File, error) {
	if !validID.MatchString(id) {
		return cachedSummary{}, nil, fmt.Errorf("%w: run id %q", ErrNotFound, id)
	}
	f, key, err := d.openFile(id, RecordFile, MaxRecordBytes)
	switch {
	case errors.Is(err, ErrNotFound):
		return cachedSummary{}, nil, err
	case err != nil:
		rec := corruptRecord(id, err)
		return cachedSummary{sum: rec.Summary()}, nil, nil
	}
	d.mu.Lock()
	c, ok := d.summaries[id]
	d.mu.Unlock()
	if !ok || c.key != key {
		if c, err = d.decode(ctx, id, f, key); err != nil {
			f.Close()
			return cachedSummary{}, nil, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			f.Close()
			return cachedSummary{}, nil, err
		}
	}
	if open && c.asIs {
		return c, f, nil
	}
	f.Close()
	return c, nil, nil
}

// decode reads and checks a record file, and keeps its summary.
func (d *Dir) decode(ctx context.Context, id string, f *os.File, key fileKey) (cachedSummary, error) {
	release, err := d.Heavy(ctx)
	if err != nil {
		return cachedSummary{}, err
	}
	defer release()
	b, err := io.ReadAll(&limitedReader{Reader: f, close: f.Close, limit: MaxRecordBytes, what: filepath.Join("runs", id, RecordFile)})
	var c cachedSummary
	if err == nil {
		var rec run.Record
		if rec, err = parseRecord(id, b); err == nil {
			c = cachedSummary{key: key, sum: rec.Summary(), asIs: rec.Consumers != nil}
		}
	}
	if err != nil {
		rec := corruptRecord(id, err)
		c = cachedSummary{key: key, sum: rec.Summary()}
	}
	d.mu.Lock()
	if len(d.summaries) < maxSummaries {
		d.summaries[id] = c
	}
	d.mu.Unlock()
	return c, nil
}

// forget drops the summaries of runs no longer there.
func (d *Dir) forget(ids []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.summaries) <= len(ids) {
		return
	}
	keep := make(map[string]bool, len(ids))
	for _, id := range ids {
		keep[id] = true
	}
	for id := range d.summaries {
		if !keep[id] {
			delete(d.summaries, id)
		}
	}
}
