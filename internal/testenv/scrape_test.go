package testenv

import (
	"slices"
	"testing"
)

func TestDuplicateSeries(t *testing.T) {
	scrape := `# HELP a_total A.
# TYPE a_total counter
a_total{cgroup="/x \"}\\ y",kind="file"} 1
a_total{cgroup="/x \"}\\ y",kind="anon"} 2
a_total{cgroup="/x \"}\\ y",kind="file"} 3
b 4
b 5
c{} 6
`
	if got, want := DuplicateSeries(scrape), []string{`a_total{cgroup="/x \"}\\ y",kind="file"}`, "b"}; !slices.Equal(got, want) {
		t.Errorf("DuplicateSeries = %q, want %q", got, want)
	}
	if got := DuplicateSeries("a 1\n# EOF\n"); len(got) != 0 {
		t.Errorf("one series: %q", got)
	}
}
