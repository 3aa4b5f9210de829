package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/store"
)

// The committed runs, recorded on this project's 2-core test machine: an e4
// run at scale 0.1 through the observer (BPF probes and the detector on; two
// consumers OOM-killed), and a small fill run through loadgen fill.
const (
	e4Run   = "20261122-032121-67c5ed"
	fillRun = "20261122-032349-0338ac"
)

// dataDir copies the committed data directory, so a test may change it.
func dataDir(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS("testdata/data")); err != nil {
		t.Fatal(err)
	}
	return dst
}

// A run on an emulated swap device says so in its spec line and titles, and
// what the throttle held on the host it ran on in a line of its own.
func TestReportNamesTheSwapDevice(t *testing.T) {
	dir := dataDir(t)
	file := filepath.Join(dir, "runs", e4Run, "record.json")
	var rec map[string]any
	if err := json.Unmarshal([]byte(readFile(t, file)), &rec); err != nil {
		t.Fatal(err)
	}
	rec["spec"].(map[string]any)["swap_device"] = map[string]any{"profile": "hdd-2013", "read_iops": 120, "write_iops": 120}
	rec["swap_emulation"] = map[string]any{"devices": []any{map[string]any{"device": "254:0", "swap": "/var/tmp/swap"}},
		"cgroup": "/sys/fs/cgroup/blkio/thrashscope-run-" + e4Run, "controller": "blkio", "throttled": []any{"reads"},
		"note": "swap-ins only", "read_ios": 7200, "write_ios": 0, "read_bytes": 29491200, "write_bytes": 0}
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "report")
	if _, err := Build(Config{DataDir: dir, RunIDs: []string{e4Run}, OutDir: out}); err != nil {
		t.Fatal(err)
	}
	summary := readFile(t, filepath.Join(out, "summary.txt"))
	for _, line := range []string{
		"spec                         e4 at scale 0.1 (25 × 10 MB in 102 MiB, anon, swap hdd-2013)",
		"swap device                  hdd-2013 (120 read I/Os, 120 write I/Os a second); reads throttled on 254:0 (blkio); swap-outs not throttled on cgroup v1",
	} {
		if !strings.Contains(summary, "  "+line+"\n") {
			t.Errorf("summary.txt lacks %q:\n%s", line, summary)
		}
	}
	if svg := readFile(t, filepath.Join(out, e4Run, "paper.svg")); !strings.Contains(svg, "swap hdd-2013") {
		t.Error("paper.svg's title does not name the swap device")
	}
}

func TestReportOfARealE4Run(t *testing.T) {
	out := filepath.Join(t.TempDir(), "report")
	res, err := Build(Config{DataDir: "testdata/data", RunIDs: []string{e4Run}, OutDir: out})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{e4Run + "/paper.png", e4Run + "/paper.svg", e4Run + "/processes.png", e4Run + "/processes.svg", "summary.txt"}
	checkFiles(t, out, res, want)
	summary := readFile(t, filepath.Join(out, "summary.txt"))
	for _, line := range []string{
		"spec                         e4 at scale 0.1 (25 × 10 MB in 102 MiB, anon)",
		"outcome                      completed after 60.0 s",
		"planned demand > limit       at 20.0 s",
		"thrashing onset              21.3 s (detector); swap-in rule: 21.3 s",
		"recovery                     49.3 s (detector), 28.0 s after onset; swap-in rule: 49.3 s",
		"swap-in threshold            5408 pages/s",
		"peak swap-in                 54084 pages/s at 23.3 s",
		"peak swap-out                44330 pages/s",
		"peak PSI memory some / full  92.7 % / 64.9 %",
		"consumer lateness            max 3.42 s (consumer-01), mean 0.81 s; 7 of 23 late (more than 1.1 s past t_f)",
		"consumers OOM-killed         2 of 25 (consumer-15, consumer-20)",
	} {
		if !strings.Contains(summary, "  "+line+"\n") {
			t.Errorf("summary.txt lacks the line %q:\n%s", line, summary)
		}
	}
	if strings.Contains(summary, "\nacross ") {
		t.Error("one run, but summary.txt has an across-runs block")
	}
	if len(res.Summaries) != 1 || res.Summaries[0].Primary().Source != "detector" {
		t.Errorf("summaries: %+v", res.Summaries)
	}
}

func TestReportOfAFillRun(t *testing.T) {
	out := t.TempDir()
	res, err := Build(Config{DataDir: "testdata/data", RunIDs: []string{fillRun}, OutDir: out})
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, out, res, []string{fillRun + "/paper.png", fillRun + "/paper.svg", fillRun + "/processes.png",
		fillRun + "/processes.svg", fillRun + "/fill.png", fillRun + "/fill.svg", "summary.txt"})
	summary := readFile(t, filepath.Join(out, "summary.txt"))
	// Chunk 7 is the first past the 128 MiB limit: three times slower.
	for _, line := range []string{
		"    0        16 MiB    0.016 ± 0.001 s     23596 MiB      4096 MiB",
		"    7       128 MiB    0.048 ± 0.008 s     23552 MiB      4094 MiB",
	} {
		if !strings.Contains(summary, line+"\n") {
			t.Errorf("summary.txt lacks %q:\n%s", line, summary)
		}
	}
	if strings.Contains(summary, "\n  consumer lateness ") {
		t.Error("a fill run has no schedule, but the summary reports lateness")
	}
}

func TestReportOfSeveralRuns(t *testing.T) {
	data := dataDir(t)
	// A second run: the same samples under another id, so the overlay and
	// the mean ± SD (which must be the value ± 0) have two runs to work on.
	twin := "20261122-040000-abcdef"
	src := filepath.Join(data, "runs", e4Run)
	if err := os.CopyFS(filepath.Join(data, "runs", twin), os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	var rec run.Record
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(src, store.RecordFile))), &rec); err != nil {
		t.Fatal(err)
	}
	rec.ID = twin
	d, _ := store.Open(data)
	if err := d.SaveRecord(rec); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := Build(Config{DataDir: data, RunIDs: []string{e4Run, twin}, OutDir: out})
	if err != nil {
		t.Fatal(err)
	}
	checkFiles(t, out, res, []string{"stability.png", "stability.svg", "summary.txt", e4Run + "/paper.png", twin + "/paper.png"})
	summary := readFile(t, filepath.Join(out, "summary.txt"))
	for _, line := range []string{
		"across 2 runs (mean ± SD, over the runs that have the figure)",
		"  thrashing onset              21.3 ± 0.0 s (n=2)",
		"  recovery                     49.3 ± 0.0 s (n=2)",
		"  peak swap-in                 54084 ± 0 pages/s (n=2)",
		"  max consumer lateness        3.42 ± 0.00 s (n=2)",
		"  consumers OOM-killed         2.0 ± 0.0 (n=2)",
	} {
		if !strings.Contains(summary, line+"\n") {
			t.Errorf("summary.txt lacks %q:\n%s", line, summary)
		}
	}
}

func TestReportRefusesWithAClearMessage(t *testing.T) {
	data := dataDir(t)
	d, _ := store.Open(data)
	active, _ := d.LoadRecord(e4Run)
	active.ID, active.State, active.EndedAt = "20261122-050000-000001", run.StateRunning, nil
	d.SaveRecord(active)
	noSamples, _ := d.LoadRecord(e4Run)
	noSamples.ID = "20261122-050000-000002"
	d.SaveRecord(noSamples)
	blocker := filepath.Join(t.TempDir(), "file")
	os.WriteFile(blocker, nil, 0o600)
	// A record whose id would lead the report outside --out, with its
	// samples in place so nothing else stops it.
	const escaping = "20261122-050000-000003"
	crafted, _ := d.LoadRecord(e4Run)
	crafted.ID = "../../escaped"
	b, _ := json.Marshal(crafted)
	samples, _ := d.ReadFile(e4Run, store.SamplesFile)
	d.WriteFile(escaping, store.SamplesFile, samples)
	d.WriteFile(escaping, store.RecordFile, b)
	escapeOut := filepath.Join(t.TempDir(), "a", "b")

	cases := map[string]struct {
		cfg  Config
		want []string
	}{
		"unknown id": {Config{DataDir: data, RunIDs: []string{"nope"}, OutDir: t.TempDir()},
			[]string{`no run "nope"`, e4Run + " (e4, completed)", fillRun + " (fill, completed)"}},
		"active": {Config{DataDir: data, RunIDs: []string{active.ID}, OutDir: t.TempDir()},
			[]string{"is still running", "wait for it to end", "DELETE /api/v1/runs/" + active.ID}},
		"no samples": {Config{DataDir: data, RunIDs: []string{noSamples.ID}, OutDir: t.TempDir()},
			[]string{"has no samples.csv", "report another run"}},
		"presets": {Config{DataDir: data, RunIDs: []string{e4Run, fillRun}, OutDir: t.TempDir()},
			[]string{"different presets", "(e4)", "(fill)", "report them separately"}},
		"twice": {Config{DataDir: data, RunIDs: []string{e4Run, e4Run}, OutDir: t.TempDir()}, []string{"given twice"}},
		"id escaping --out": {Config{DataDir: data, RunIDs: []string{escaping}, OutDir: escapeOut},
			[]string{"run record " + escaping + " is corrupt", `says its id is "../../escaped"`}},
		"no runs": {Config{DataDir: data, OutDir: t.TempDir()}, []string{"--run ID"}},
		"not a data dir": {Config{DataDir: t.TempDir(), RunIDs: []string{e4Run}, OutDir: t.TempDir()},
			[]string{"no runs/ directory", "--data.dir"}},
		"out not makeable": {Config{DataDir: data, RunIDs: []string{e4Run}, OutDir: filepath.Join(blocker, "report")},
			[]string{"the output directory --out=", "cannot make", "choose a directory you can write"}},
	}
	for name, c := range cases {
		_, err := Build(c.cfg)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", name, err, w)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(escapeOut, "..", "..", "escaped")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the report wrote outside --out: %v", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkFiles: Build wrote exactly the wanted files under out, every PNG
// decodes and every SVG is XML with an svg root.
func checkFiles(t *testing.T, out string, res Result, want []string) {
	t.Helper()
	got := map[string]bool{}
	for _, f := range res.Files {
		rel, _ := filepath.Rel(out, f)
		got[filepath.ToSlash(rel)] = true
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("%s was not written; wrote %v", w, res.Files)
		}
	}
	for _, f := range res.Files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(f) {
		case ".png":
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Errorf("%s: %v", f, err)
			} else if img.Bounds().Dx() < 1000 {
				t.Errorf("%s is %d px wide", f, img.Bounds().Dx())
			}
		case ".svg":
			dec := xml.NewDecoder(bytes.NewReader(b))
			root := ""
			for {
				tok, err := dec.Token()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Errorf("%s: %v", f, err)
					break
				}
				if se, ok := tok.(xml.StartElement); ok && root == "" {
					root = se.Name.Local
				}
			}
			if root != "svg" {
				t.Errorf("%s: root element %q", f, root)
			}
		case ".txt":
		default:
			t.Errorf("unexpected file %s", f)
		}
	}
}

// A samples.csv with a value no run writes (NaN, ±Inf, -1e308) is refused
// when read, naming the run, the file, the line and the column, and the
// report returns at once instead of spinning in the swap-in rule.
func TestReportRefusesNonFiniteSamples(t *testing.T) {
	for _, v := range []string{"NaN", "+Inf", "-1e308"} {
		data := dataDir(t)
		d, _ := store.Open(data)
		b, err := d.ReadFile(e4Run, store.SamplesFile)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		cells := strings.Split(lines[5], ",")
		cells[3] = v // swap_in_pages_per_second
		lines[5] = strings.Join(cells, ",")
		if err := d.WriteFile(e4Run, store.SamplesFile, []byte(strings.Join(lines, "\n"))); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := Build(Config{DataDir: data, RunIDs: []string{e4Run}, OutDir: t.TempDir()})
			done <- err
		}()
		select {
		case err := <-done:
			want := "run " + e4Run + ": samples.csv line 6: swap_in_pages_per_second: "
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("swap-in rate %s: %v, want an error saying %q", v, err, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("swap-in rate %s: the report did not return in 20 s", v)
		}
	}
}

// A record that lists fewer consumers than its processes.csv uses is
// refused, naming the record and the line, where the report used to index
// past the record's consumers and panic.
func TestReportRefusesATableOfAnotherRecord(t *testing.T) {
	data := dataDir(t)
	d, _ := store.Open(data)
	b, err := d.ReadFile(e4Run, store.ProcessesFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	cells := strings.Split(lines[1], ",")
	cells[1] = "30" // consumer-30 of a 25-consumer run
	lines[1] = strings.Join(cells, ",")
	if err := d.WriteFile(e4Run, store.ProcessesFile, []byte(strings.Join(lines, "\n"))); err != nil {
		t.Fatal(err)
	}
	_, err = Build(Config{DataDir: data, RunIDs: []string{e4Run}, OutDir: t.TempDir()})
	want := "run " + e4Run + ": processes.csv line 2 is of consumer 30, but the record lists 25 consumers"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want an error saying %q", err, want)
	}
}

// observer report runs as root, and its --out may be a directory another
// user made first under /var/tmp: a link planted at summary.txt is
// replaced, not written through, and one planted at a run's directory is
// refused; the files they point at keep their content.
func TestReportWritesThroughNoLink(t *testing.T) {
	out := t.TempDir()
	victim := filepath.Join(t.TempDir(), "passwd")
	os.WriteFile(victim, []byte("root:x:0:0\n"), 0o644)
	os.Symlink(victim, filepath.Join(out, "summary.txt"))
	if _, err := Build(Config{DataDir: "testdata/data", RunIDs: []string{e4Run}, OutDir: out}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root:x:0:0\n" {
		t.Errorf("the report wrote through summary.txt's link: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(out, "summary.txt")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("summary.txt: %v %v, want a regular file", fi, err)
	}

	out = t.TempDir()
	elsewhere := t.TempDir()
	os.Symlink(elsewhere, filepath.Join(out, e4Run))
	_, err := Build(Config{DataDir: "testdata/data", RunIDs: []string{e4Run}, OutDir: out})
	if err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("a link at the run's directory: %v", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("the report wrote through the run directory's link: %v", ents)
	}
}
