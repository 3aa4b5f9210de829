package compare

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// docsPolicies holds the comparisons the docs report.
const docsPolicies = "../../docs/policies"

// Every committed comparison loads as one comparison, and the findings it
// holds beyond its runs' spread are what the docs' tables say: this
// commit's comparisons, read without running anything.
func TestCommittedComparisonsLoad(t *testing.T) {
	dirs, err := CommittedUnder(docsPolicies)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 4 {
		t.Fatalf("comparisons under %s: %v, want the four on the host's swap and more", docsPolicies, dirs)
	}
	for _, dir := range dirs {
		c, err := LoadCommitted(dir)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		if c.Arms < 2 || c.Repeats < 2 || c.Longest <= 0 {
			t.Errorf("%s: %d arms (policies %v), %d repeats, longest run %s: want two arms or more, repeated", dir, c.Arms, c.Policies, c.Repeats, c.Longest)
		}
		for _, d := range Directions(c.Results) {
			t.Logf("%s: %s", strings.TrimPrefix(dir, docsPolicies+"/"), d)
		}
	}
}

// The short form of the check that each committed comparison keeps its
// findings at this commit: each comparison on the host's own swap that
// has a finding beyond its runs' spread runs again, each policy once, and
// every finding must lie the same way. The full form (make bench, bench/
// comparisons) runs each with its committed repeats, the emulated swap
// devices' too, which take up to hours.
func TestCommittedComparisonsKeepTheirDirections(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	dirs, err := CommittedUnder(docsPolicies)
	if err != nil {
		t.Fatal(err)
	}
	loadgen := testenv.Binary(t, "loadgen")
	ran := 0
	for _, dir := range dirs {
		name := strings.TrimPrefix(dir, docsPolicies+"/")
		c, err := LoadCommitted(dir)
		if err != nil {
			t.Fatal(err)
		}
		ds := Directions(c.Results)
		if c.Emulated() || len(ds) == 0 {
			t.Logf("%s: not run here (emulated swap device %v; %d findings beyond the runs' spread)", name, c.Emulated(), len(ds))
			continue
		}
		ran++
		rs, err := c.Rerun(context.Background(), 1, loadgen, filepath.Join(t.TempDir(), "cmp"), io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range Keeps(ds, rs) {
			t.Errorf("%s: %s", name, p)
		}
		t.Logf("%s: %d findings checked:\n%s", name, len(ds), Table(rs))
	}
	if ran == 0 {
		t.Fatal("no committed comparison had a finding to check")
	}
}

// docsSettings holds the comparisons of memory settings the docs report.
const docsSettings = "../../docs/settings"

// The README's table of what the settings comparisons found is the one
// their committed runs give, and so is docs/settings.md's: a run replaced
// by one that shows something else changes the table, and fails here
// until both pages say so.
func TestCommittedSettingsTable(t *testing.T) {
	table, err := SettingsTable(docsSettings, SettingsFindings)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table)
	for _, page := range []string{"../../README.md", "../../docs/settings.md"} {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(text), table) {
			t.Errorf("%s's table of the settings' findings is not the one docs/settings gives; put this in it:\n%s", page, table)
		}
	}
}
