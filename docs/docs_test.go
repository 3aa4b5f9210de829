// Package docs_test checks the project's Markdown pages: the README stays a
// front door of at most 300 lines, and every relative link of every page
// leads to a file that exists and, with a #fragment, to a heading there.
package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/settings"
)

const root = ".."

func TestReadmeIsAFrontDoor(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, want at most 300: move the detail into a page under docs/ and link it", n)
	}
}

var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// pages lists the project's Markdown files, build output and vendored
// trees left out.
func pages(t *testing.T) []string {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// anchors are the GitHub anchors of a Markdown file's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	fence := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// withoutCode drops fenced blocks and inline code, where a bracket is not
// a link.
func withoutCode(text string) string {
	var b strings.Builder
	fence := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if !fence {
			b.WriteString(regexp.MustCompile("`[^`]*`").ReplaceAllString(line, ""))
		}
	}
	return b.String()
}

func TestEveryLinkLeadsSomewhere(t *testing.T) {
	ps := pages(t)
	if len(ps) < 8 {
		t.Fatalf("found %d Markdown pages, want the README and its pages", len(ps))
	}
	for _, page := range ps {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(withoutCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
			}
			st, err := os.Stat(file)
			if err != nil {
				t.Errorf("%s links %s: no such file", page, target)
				continue
			}
			if frag == "" || st.IsDir() || !strings.HasSuffix(file, ".md") {
				continue
			}
			text, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(text))[frag] {
				t.Errorf("%s links %s: %s has no heading #%s", page, target, file, frag)
			}
		}
	}
}

// tableNames are the first-column names (in backquotes) of the table whose
// header row starts with "| "+first+" |".
func tableNames(t *testing.T, page, first string) []string {
	b, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	in := false
	cell := regexp.MustCompile("^\\| `([a-z0-9_-]+)` \\|")
	for line := range strings.Lines(string(b)) {
		switch {
		case strings.HasPrefix(line, "| "+first+" |"):
			in = true
		case in && !strings.HasPrefix(line, "|"):
			return names
		case in:
			if m := cell.FindStringSubmatch(line); m != nil {
				names = append(names, m[1])
			}
		}
	}
	return names
}

// The docs' tables of presets and policies hold what the registries hold,
// so one registered in its own file needs its line here too.
func TestDocsListTheRegistries(t *testing.T) {
	for _, c := range []struct {
		page, first string
		want        []string
	}{
		{"docs/runs.md", "preset", run.PresetNames()},
		{"docs/policies/README.md", "policy", policy.Names()},
		{"docs/settings.md", "setting", settings.Names()},
	} {
		got := tableNames(t, c.page, c.first)
		slices.Sort(got)
		want := slices.Sorted(slices.Values(c.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s's table of %ss lists %v, the registry holds %v", c.page, c.first, got, want)
		}
	}
}

// The lines that list the policies in a sentence hold the registry too,
// and every policy's own gauge has its metric's row.
func TestDocsInlineListsHoldTheRegistry(t *testing.T) {
	backticked := regexp.MustCompile("`([a-z0-9_-]+)`")
	want := slices.Sorted(slices.Values(policy.Names()))
	for _, c := range []struct{ page, line string }{
		{"runs.md", "| `policy` |"},
		{"metrics.md", "| `run_policy_info` |"},
	} {
		b, err := os.ReadFile(c.page)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for l := range strings.Lines(string(b)) {
			if !strings.HasPrefix(l, c.line) {
				continue
			}
			found = true
			var got []string
			for _, m := range backticked.FindAllStringSubmatch(l, -1) {
				if slices.Contains(policy.Names(), m[1]) || !strings.Contains(m[1], "_") && m[1] != "policy" && m[1] != "fill" && m[1] != "none" {
					got = append(got, m[1])
				}
			}
			got = slices.Compact(slices.Sorted(slices.Values(got)))
			if !slices.Equal(got, want) {
				t.Errorf("%s's line %q lists the policies %v; the registry holds %v", c.page, c.line, got, want)
			}
		}
		if !found {
			t.Errorf("%s has no line starting %q", c.page, c.line)
		}
	}
	metrics, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range policy.AllGauges() {
		if !strings.Contains(string(metrics), "`run_policy_"+g.Name+"`") {
			t.Errorf("metrics.md has no row for run_policy_%s, a policy's own gauge", g.Name)
		}
	}
}
