package testenv

import (
	"strings"
	"testing"
)

// DuplicateSeries are the series a scrape in the text or OpenMetrics
// exposition format holds more than once (a name and a label set, as
// written: the client writes a series' labels in one order). Prometheus
// drops or mixes such samples, and promtool check metrics passes them.
func DuplicateSeries(scrape string) []string {
	seen := map[string]bool{}
	var dup []string
	for line := range strings.Lines(scrape) {
		if line = strings.TrimSpace(line); line == "" || line[0] == '#' {
			continue
		}
		key := seriesOf(line)
		if seen[key] {
			dup = append(dup, key)
		}
		seen[key] = true
	}
	return dup
}

// seriesOf is a sample line's name and labels: up to the space after its
// name, or after the brace that closes its labels (a label value may hold
// spaces and braces, quoted, with \" and \\ escaped).
func seriesOf(line string) string {
	i := strings.IndexAny(line, "{ ")
	if i < 0 || line[i] == ' ' {
		return line[:max(i, 0)]
	}
	quoted := false
	for j := i + 1; j < len(line); j++ {
		switch c := line[j]; {
		case quoted && c == '\\':
			j++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return line[:j+1]
		}
	}
	return line
}

// NoDuplicateSeries fails t when a scrape holds a series twice.
func NoDuplicateSeries(t testing.TB, scrape string) {
	t.Helper()
	if dup := DuplicateSeries(scrape); len(dup) > 0 {
		t.Errorf("%d series more than once in one scrape, the first %q", len(dup), dup[0])
	}
}
