package store

import (
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/row"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

func TestRecordsRoundTripNewestFirst(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for i, id := range []string{"older", "newer"} {
		rec := testenv.Record(id, run.StateCompleted, t0.Add(time.Duration(i)*time.Hour))
		rec.Spec.Consumers = 1
		rec.Consumers = []run.ConsumerRecord{{Index: 0, PID: 42, Cycles: 7}}
		if err := d.SaveRecord(rec); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := d.Records()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].ID != "newer" || recs[1].Consumers[0].Cycles != 7 {
		t.Fatalf("records: %+v", recs)
	}
	if _, err := d.LoadRecord("missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing record: %v", err)
	}
	if _, err := d.LoadRecord("../etc"); !errors.Is(err, ErrNotFound) {
		t.Errorf("path escape: %v", err)
	}
	if err := d.WriteFile("../../x", "f", nil); err == nil {
		t.Error("a path-escaping id was written")
	}
}

func TestAtomicWriteLeavesNoTemporaries(t *testing.T) {
	root := t.TempDir()
	d, _ := Open(root)
	if err := d.WriteFile("r1", SamplesFile, []byte("a\n")); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("r1", SamplesFile, []byte("b\n")); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "runs", "r1"))
	if len(ents) != 1 {
		t.Errorf("run dir holds %d files, want 1", len(ents))
	}
	b, _ := d.ReadFile("r1", SamplesFile)
	if string(b) != "b\n" {
		t.Errorf("got %q", b)
	}
	// A crash mid-write leaves a temporary; Open leaves it (another
	// process's write may be in progress), and the process that holds the
	// directory clears it (ClearTemp, from runner.New).
	tmp := filepath.Join(root, "runs", "r1", ".tmp-record.json-123")
	os.WriteFile(tmp, []byte(`{"id":`), 0o600)
	again, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); err != nil {
		t.Errorf("Open removed a temporary file: %v", err)
	}
	again.ClearTemp()
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Error("temporary file survived ClearTemp")
	}
}

func TestCorruptRecordIsReportedNotHidden(t *testing.T) {
	root := t.TempDir()
	d, _ := Open(root)
	d.SaveRecord(testenv.Record("good", run.StateCompleted, time.Now()))
	write := func(id, body string) {
		os.MkdirAll(filepath.Join(root, "runs", id), 0o750)
		os.WriteFile(filepath.Join(root, "runs", id, RecordFile), []byte(body), 0o600)
	}
	write("bad", "{")
	write("twice", `{"id":"twice","state":"completed","state":"running"}`)
	write("elsewhere", `{"id":"../../x","state":"completed"}`)
	recs, err := d.Records()
	if err != nil {
		t.Fatalf("Records: %v; a corrupt record must not fail the listing", err)
	}
	got := map[string]run.Record{}
	for _, r := range recs {
		got[r.ID] = r
	}
	if len(recs) != 4 || got["good"].State != run.StateCompleted {
		t.Fatalf("records %+v, want good and the three corrupt ones flagged", recs)
	}
	if recs[0].ID != "good" {
		t.Errorf("the readable record should come first, got %s", recs[0].ID)
	}
	for id, want := range map[string]string{"bad": "corrupt", "twice": `"state" is given twice`, "elsewhere": `says its id is "../../x"`} {
		if r := got[id]; r.State != run.StateCorrupt || !strings.Contains(r.Reason, want) {
			t.Errorf("%s: state %q reason %q, want corrupt saying %s", id, r.State, r.Reason, want)
		}
	}
	// Prune leaves corrupt runs for an operator.
	if removed, err := d.Prune(0); err != nil || len(removed) != 1 || removed[0] != "good" {
		t.Errorf("Prune(0) removed %v (%v), want only good", removed, err)
	}
}

// A record read back is held to what thrashscope writes, as strictly as a
// spec on its way in: a crafted one is listed corrupt, naming the member,
// and nothing reads its content.
func TestCraftedRecordIsCorrupt(t *testing.T) {
	root := t.TempDir()
	d, _ := Open(root)
	good := testenv.Record("good", run.StateCompleted, time.Now())
	good.Spec.Consumers = 2
	good.Consumers = []run.ConsumerRecord{{Index: 0}, {Index: 1}}
	b, _ := json.Marshal(good)
	for id, tc := range map[string]struct{ from, to, want string }{
		"policy-lines":   {`"policy":"none"`, `"policy":"none\n| tpf | 0 |"`, `spec.policy: "none\n| tpf | 0 |": want one of none, binpack, calmdown, tpf`},
		"preset":         {`"preset":"e4"`, `"preset":"e9"`, "spec.preset"},
		"scale":          {`"scale":0.1`, `"scale":1e300`, "spec.scale"},
		"state":          {`"state":"completed"`, `"state":"done"`, `state "done"`},
		"reason-escape":  {`"state":"completed"`, `"state":"completed","reason":"\u001b]0;owned\u0007"`, "reason"},
		"cgroup-newline": {`"cgroup":""`, `"cgroup":"/a\nb"`, "holds a control character"},
		"index":          {`"index":1`, `"index":7`, "consumers[1].index 7"},
		"lateness":       {`"lateness_seconds":0}]`, `"lateness_seconds":-1e308}]`, "consumers[1].lateness_seconds"},
		"fewer":          {`,{"index":1`, `],"x":[{"index":1`, ""},
	} {
		body := strings.Replace(strings.Replace(string(b), `"id":"good"`, `"id":"`+id+`"`, 1), tc.from, tc.to, 1)
		if body == strings.Replace(string(b), `"id":"good"`, `"id":"`+id+`"`, 1) {
			t.Fatalf("%s: %s is not in the record %s", id, tc.from, b)
		}
		if id == "fewer" {
			body = strings.Replace(body, `,"x":`, `,"transitions":`, 1)
			tc.want = "consumers: 1 listed, the spec plans 2"
		}
		os.MkdirAll(filepath.Join(root, "runs", id), 0o750)
		os.WriteFile(filepath.Join(root, "runs", id, RecordFile), []byte(body), 0o600)
		rec, err := d.Record(id)
		if err != nil || rec.State != run.StateCorrupt || !strings.Contains(rec.Reason, tc.want) {
			t.Errorf("%s: %v, state %q, reason %q; want corrupt saying %s", id, err, rec.State, rec.Reason, tc.want)
		}
	}
}

// Data-dir reads take only regular files, never through a link, and never
// more than a run writes.
func TestReadFileRefusesLinksAndGiants(t *testing.T) {
	root := t.TempDir()
	d, _ := Open(root)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte(`{"id":"linked","state":"completed"} SECRET`), 0o600)
	runs := filepath.Join(root, "runs")

	os.MkdirAll(filepath.Join(runs, "linked"), 0o750)
	os.Symlink(secret, filepath.Join(runs, "linked", RecordFile))
	os.Symlink(filepath.Dir(secret), filepath.Join(runs, "dirlink"))
	os.MkdirAll(filepath.Join(runs, "fifo"), 0o750)
	if err := syscall.Mkfifo(filepath.Join(runs, "fifo", RecordFile), 0o600); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(runs, "giant"), 0o750)
	f, _ := os.Create(filepath.Join(runs, "giant", RecordFile))
	f.Truncate(8 << 30) // sparse: 8 GiB that would be read into memory
	f.Close()

	for id, want := range map[string]string{
		"linked":  "symbolic link",
		"dirlink": "symbolic link",
		"fifo":    "not a regular file",
		"giant":   "more than the 8388608 a run writes",
	} {
		done := make(chan error, 1)
		go func() { _, err := d.LoadRecord(id); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want an error saying %s", id, err, want)
			}
			if err != nil && strings.Contains(err.Error(), "SECRET") {
				t.Errorf("%s: the error echoes the linked file: %v", id, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: LoadRecord blocked", id)
		}
	}
	recs, err := d.Records()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID == "dirlink" {
			t.Error("a symlinked run directory was listed")
		}
		if r.State != run.StateCorrupt {
			t.Errorf("%s listed as %s, want corrupt", r.ID, r.State)
		}
	}
}

func TestTableCSV(t *testing.T) {
	var tb Table
	tb.Append(Row{Host: row.Host{CPUUserPercent: 12.5, SwapInPagesPerSecond: 300}, ElapsedSeconds: 1, ConsumersActive: 3, DemandBytes: 30 << 20})
	recs, err := csv.NewReader(strings.NewReader(string(tb.CSV()))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := "elapsed_seconds,cpu_user_percent,cpu_system_percent,swap_in_pages_per_second,swap_out_pages_per_second"
	if got := strings.Join(recs[0][:5], ","); got != want {
		t.Errorf("header starts %q", got)
	}
	if len(recs) != 2 || len(recs[1]) != len(Columns) || recs[1][1] != "12.500" || recs[1][3] != "300.000" || recs[1][13] != "3" {
		t.Errorf("rows %v", recs)
	}
}

func TestPruneKeepsTheNewestAndActive(t *testing.T) {
	d, _ := Open(t.TempDir())
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	for i := range 5 {
		state := run.StateCompleted
		if i == 0 {
			state = run.StateRunning // the oldest, but still active
		}
		d.SaveRecord(testenv.Record("r"+string(rune('a'+i)), state, t0.Add(time.Duration(i)*time.Minute)))
	}
	removed, err := d.Prune(2)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := d.Records()
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "re,rd,ra" || strings.Join(removed, ",") != "rc,rb" {
		t.Errorf("kept %v, removed %v", ids, removed)
	}
}

// FuzzDecodeRecord: a record read back is refused, or holds only what
// thrashscope writes: each enum one of its values, each string valid UTF-8
// without a control character (a process's own name excepted), each
// consumer at its index; and it saves and reads back the same.
func FuzzDecodeRecord(f *testing.F) {
	valid := testenv.Record("fz", run.StateCompleted, time.Date(2026, 11, 22, 3, 21, 21, 0, time.UTC))
	valid.Reason = "aborted by request"
	valid.Decisions = []run.Decision{{At: valid.StartedAt, Kind: "freeze", Consumer: 3, Why: "out of bin 1 of 3"}}
	valid.Transitions = []run.Transition{{At: valid.StartedAt, To: "thrashing", Processes: []string{"consumer-01/41"}}}
	b, _ := json.Marshal(valid)
	f.Add(b)
	f.Add(bytes.Replace(b, []byte(`"policy":"none"`), []byte(`"policy":"none\nrm -rf /"`), 1))
	f.Add(bytes.Replace(b, []byte(`"aborted by request"`), []byte(`"a\u001b[31mb"`), 1))
	f.Add(bytes.Replace(b, []byte(`"freeze"`), []byte(`"melt"`), 1))
	f.Add([]byte(`{"id":"fz","state":"completed","state":"running"}`))
	f.Add([]byte(`{"id":"../../x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		root := t.TempDir()
		d, _ := Open(root)
		os.MkdirAll(filepath.Join(root, "runs", "fz"), 0o750)
		os.WriteFile(filepath.Join(root, "runs", "fz", RecordFile), b, 0o600)
		rec, err := d.LoadRecord("fz")
		if err != nil {
			return
		}
		plain := func(field, s string) {
			if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) {
				t.Fatalf("%s %q was read back", field, s)
			}
		}
		one := func(field, s string, of ...string) {
			if !slices.Contains(of, s) {
				t.Fatalf("%s %q was read back; want one of %v", field, s, of)
			}
		}
		one("state", rec.State, run.StatePending, run.StateRunning, run.StateCompleted, run.StateAborted, run.StateFailed)
		one("spec.policy", rec.Spec.Policy, policy.Names()...)
		one("spec.preset", rec.Spec.Preset, run.PresetNames()...)
		one("spec.backing", rec.Spec.Backing, run.BackingAnon, run.BackingFile)
		one("spec.fill", rec.Spec.Fill, run.FillRandom, run.FillZero)
		plain("reason", rec.Reason)
		plain("cgroup", rec.Cgroup)
		for i, c := range rec.Consumers {
			plain("exit", c.Exit)
			if c.Index != i || math.IsNaN(c.LatenessSeconds) || c.LatenessSeconds < 0 {
				t.Fatalf("consumer %d: %+v", i, c)
			}
		}
		for _, dc := range rec.Decisions {
			one("decision kind", dc.Kind, "protect", "release", "freeze", "thaw")
			plain("why", dc.Why)
			plain("error", dc.Error)
		}
		for _, tr := range rec.Transitions {
			one("transition", tr.To, "normal", "monitoring", "thrashing")
		}
		if err := d.SaveRecord(rec); err != nil {
			t.Fatalf("save: %v", err)
		}
		if _, err := d.LoadRecord(rec.ID); err != nil {
			t.Fatalf("a record that was read does not read back once saved: %v", err)
		}
	})
}

// FuzzParseTables: samples.csv, processes.csv and fill.csv as read back by
// a report. Whatever a parser accepts holds every number finite and within
// its column's range, and the rows in time order.
func FuzzParseTables(f *testing.F) {
	var tb Table
	tb.Append(Row{ElapsedSeconds: 1, ConsumersActive: 3, DemandBytes: 30 << 20})
	tb.Append(Row{Host: row.Host{SwapInPagesPerSecond: 4e4}, ElapsedSeconds: 2, ConsumerStallPercent: -1})
	f.Add(tb.CSV())
	f.Add([]byte(strings.Join(ProcessColumns, ",") + "\n1,0,101,c,0,0,0,-1,0,0\n"))
	f.Add([]byte(strings.Join(Columns, ",") + "\n" + sampleRow(3, "NaN") + "\n"))
	f.Add([]byte(strings.Join(Columns, ",") + "\n" + sampleRow(0, "-1e308") + "\n"))
	f.Add(FillCSV([]FillRow{{Chunk: 0, AllocatedBytes: 1 << 20, Repeats: 3, MeanSeconds: 0.5}}))
	f.Add([]byte("elapsed_seconds\n\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		samples, _ := ParseSamples(b)
		procs, _ := ParseProcesses(b)
		fill, _ := ParseFill(b)
		checkRows(t, samples, procs, fill)
		for i := 1; i < len(samples); i++ {
			if samples[i].ElapsedSeconds <= samples[i-1].ElapsedSeconds {
				t.Fatalf("samples out of time order were accepted: %v", samples)
			}
		}
	})
}

func TestReadFileReadsGzippedTables(t *testing.T) {
	root := t.TempDir()
	d, _ := Open(root)
	dir := filepath.Join(root, "runs", "packed")
	os.MkdirAll(dir, 0o750)
	gz := func(name string, b []byte) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want := []byte("elapsed_seconds\n1.0\n")
	gz(SamplesFile+".gz", want)
	got, err := d.ReadFile("packed", SamplesFile)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("samples.csv.gz read as %q, %v", got, err)
	}
	// The plain file wins when both are there.
	os.WriteFile(filepath.Join(dir, SamplesFile), []byte("plain\n"), 0o600)
	if got, _ := d.ReadFile("packed", SamplesFile); string(got) != "plain\n" {
		t.Errorf("with both there, read %q", got)
	}
	// Neither: not found, naming the plain file.
	if _, err := d.ReadFile("packed", FillFile); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), FillFile) {
		t.Errorf("missing table: %v", err)
	}
	// A gzip bomb is held to the table limit, and garbage is named.
	gz(ProcessesFile+".gz", make([]byte, MaxTableBytes+1))
	if _, err := d.ReadFile("packed", ProcessesFile); err == nil || !strings.Contains(err.Error(), "more than the") {
		t.Errorf("a table that inflates past the limit: %v", err)
	}
	os.WriteFile(filepath.Join(dir, FillFile+".gz"), []byte("not gzip"), 0o600)
	if _, err := d.ReadFile("packed", FillFile); err == nil || !strings.Contains(err.Error(), "not a gzip file") {
		t.Errorf("a broken gzip: %v", err)
	}
	// A record is never read gzipped.
	gz(RecordFile+".gz", []byte(`{"id":"packed"}`))
	if _, err := d.ReadFile("packed", RecordFile); !errors.Is(err, ErrNotFound) {
		t.Errorf("record.json.gz was read: %v", err)
	}
}

// A run's directory or file planted as a link (the data dir of loadgen run
// --out may be anywhere) is never written through.
func TestWriteFileFollowsNoLink(t *testing.T) {
	root := t.TempDir()
	d, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	os.Symlink(elsewhere, filepath.Join(root, "runs", "planted"))
	if err := d.WriteFile("planted", RecordFile, []byte("{}")); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("a linked run directory: %v", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("written through the link: %v", ents)
	}
	victim := filepath.Join(elsewhere, "victim")
	os.WriteFile(victim, []byte("keep\n"), 0o600)
	os.MkdirAll(filepath.Join(root, "runs", "real"), 0o750)
	os.Symlink(victim, filepath.Join(root, "runs", "real", SamplesFile))
	if err := d.WriteFile("real", SamplesFile, []byte("a\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep\n" {
		t.Errorf("written through the file's link: %q", b)
	}
	if err := d.Remove("planted"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(elsewhere); err != nil {
		t.Errorf("removing a linked run removed its target: %v", err)
	}
}
