// Package report turns ended runs into a report: the paper's figures of each
// run, raw and Bézier-smoothed (Maziero et al. 2013, Figs 3-11), each
// consumer's memory demand against its resident set (Jiang and Zhang 2001),
// the stability overlay of repeated runs (Fig 12), the fill curve of seed
// 002, and summary.txt with onset, recovery, peaks and lateness. It reads
// what internal/store keeps under --data.dir and draws with internal/figures;
// `observer report` is its command line.
package report

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/thrashscope/thrashscope/internal/analysis"
	"github.com/thrashscope/thrashscope/internal/outdir"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
)

// Config says which runs to report on and where to write.
type Config struct {
	// DataDir is the observer's --data.dir, or loadgen run's --out.
	DataDir string
	RunIDs  []string
	OutDir  string
}

// Result lists what Build wrote.
type Result struct {
	Files     []string // paths, in the order written
	Summaries []analysis.Summary
}

// Build loads the runs, checks they can be reported together, and writes
// the report under cfg.OutDir: summary.txt and, when several runs are
// given, stability.png/svg at the top; each run's figures in <id>/.
func Build(cfg Config) (Result, error) {
	runs, err := Load(cfg.DataDir, cfg.RunIDs)
	if err != nil {
		return Result{}, err
	}
	if cfg.OutDir == "" {
		return Result{}, errors.New("no output directory: give --out DIR")
	}
	out, err := outdir.Open(cfg.OutDir, 0o755)
	if err != nil {
		return Result{}, fmt.Errorf("the output directory --out=%q: %w", cfg.OutDir, err)
	}
	defer out.Close()
	var res Result
	w := writer{res: &res}
	for _, r := range runs {
		dir, err := out.Sub(r.Record.ID, 0o755)
		if err != nil {
			return res, err
		}
		res.Summaries = append(res.Summaries, analysis.Measure(r).Summary)
		w.both(dir, "paper", paperFigure(r))
		if r.Processes != nil {
			w.both(dir, "processes", processFigure(r))
		}
		if r.Fill != nil {
			w.both(dir, "fill", fillFigure(r))
		}
		dir.Close()
	}
	if len(runs) > 1 {
		w.both(out, "stability", stabilityFigure(runs))
	}
	w.file(out, "summary.txt", []byte(SummaryText(runs, res.Summaries)))
	return res, w.err
}

// Load reads the runs from the data directory, refusing what cannot be
// reported: an unknown id (the error lists the ones there are), a run still
// going, a run without samples, or runs of different presets together.
func Load(dataDir string, ids []string) ([]analysis.Recorded, error) {
	if len(ids) == 0 {
		return nil, errors.New("no run given: name one or more with --run ID")
	}
	d, err := store.OpenExisting(dataDir)
	if err != nil {
		return nil, err
	}
	var runs []analysis.Recorded
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return nil, fmt.Errorf("run %s is given twice: give each run once", id)
		}
		seen[id] = true
		r, err := loadRun(d, id)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	for _, r := range runs[1:] {
		if a, b := runs[0].Record.Spec.Preset, r.Record.Spec.Preset; a != b {
			return nil, fmt.Errorf("runs %s (%s) and %s (%s) are of different presets: the stability overlay compares repeats of one preset; report them separately",
				runs[0].Record.ID, a, r.Record.ID, b)
		}
	}
	return runs, nil
}

func loadRun(d *store.Dir, id string) (analysis.Recorded, error) {
	var r analysis.Recorded
	rec, err := d.LoadRecord(id)
	if errors.Is(err, store.ErrNotFound) {
		return r, fmt.Errorf("no run %q in %s: %s", id, d.Path(), available(d))
	}
	if err != nil {
		return r, err
	}
	if run.Active(rec.State) {
		return r, fmt.Errorf("run %s is still %s: wait for it to end (it lasts %s), or abort it with DELETE /api/v1/runs/%s; "+
			"a run left active by an observer that died is marked aborted when the observer next starts", id, rec.State, rec.Spec.Duration(), id)
	}
	r.Record = rec
	// The tables are streamed: what is held is their rows, bounded, never
	// the files (a gzipped one may inflate to gigabytes).
	f, err := d.Open(id, store.SamplesFile)
	if errors.Is(err, store.ErrNotFound) {
		return r, fmt.Errorf("run %s has no %s (it ended, %s, before its first sample was saved): there is nothing to draw; report another run", id, store.SamplesFile, rec.State)
	}
	if err != nil {
		return r, err
	}
	r.Samples, err = store.ReadSamples(f)
	f.Close()
	if err != nil {
		return r, fmt.Errorf("run %s: %w", id, err)
	}
	if len(r.Samples) == 0 {
		return r, fmt.Errorf("run %s: %s has no rows (the run ended within its first sample): report another run", id, store.SamplesFile)
	}
	if r.Processes, err = loadProcesses(d, rec); err != nil {
		return r, err
	}
	if rec.Spec.Traits().Chunks {
		b, err := d.ReadFile(id, store.FillFile)
		if err != nil {
			return r, fmt.Errorf("run %s is a fill run without %s: %w", id, store.FillFile, err)
		}
		if r.Fill, err = store.ParseFill(b); err != nil {
			return r, fmt.Errorf("run %s: %w", id, err)
		}
	}
	return r, nil
}

// loadProcesses is a run's processes table, nil when it has none.
func loadProcesses(d *store.Dir, rec run.Record) ([]store.ProcessRow, error) {
	id := rec.ID
	f, err := d.Open(id, store.ProcessesFile)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rows, err := store.ReadProcesses(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	if rows == nil {
		rows = []store.ProcessRow{}
	}
	// Every reader indexes the record's consumers by the table's.
	for n, p := range rows {
		if p.Consumer >= len(rec.Consumers) {
			return nil, fmt.Errorf("run %s: %s line %d is of consumer %d, but the record lists %d consumers: the table is not this record's; restore or remove runs/%s",
				id, store.ProcessesFile, n+2, p.Consumer, len(rec.Consumers), id)
		}
	}
	return rows, nil
}

// available names the runs a data directory holds, for an error message.
func available(d *store.Dir) string {
	recs, _ := d.Records()
	if len(recs) == 0 {
		return "it holds no runs; start one with POST /api/v1/runs or loadgen run"
	}
	const show = 10
	var ids []string
	for _, r := range recs[:min(len(recs), show)] {
		ids = append(ids, fmt.Sprintf("%s (%s, %s)", r.ID, r.Spec.Preset, r.State))
	}
	more := ""
	if len(recs) > show {
		more = fmt.Sprintf(", and %d older (GET /api/v1/runs lists them all)", len(recs)-show)
	}
	return "the runs there, newest first, are " + strings.Join(ids, ", ") + more
}

// writer writes report files, keeping the first error.
type writer struct {
	res *Result
	err error
}

// both writes a figure as base.png and base.svg in dir.
func (w *writer) both(dir *outdir.Dir, base string, fig figure) {
	for _, f := range fig.formats() {
		if w.err != nil {
			return
		}
		b, err := fig.render(f)
		if err != nil {
			w.err = fmt.Errorf("drawing %s.%s: %w", filepath.Join(dir.Path(), base), f, err)
			return
		}
		w.file(dir, base+"."+string(f), b)
	}
}

func (w *writer) file(dir *outdir.Dir, name string, b []byte) {
	if w.err != nil {
		return
	}
	if err := dir.WriteFile(name, b, 0o644); err != nil {
		w.err = fmt.Errorf("writing the report: %w", err)
		return
	}
	w.res.Files = append(w.res.Files, filepath.Join(dir.Path(), name))
}
