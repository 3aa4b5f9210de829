package main

import (
	"strings"
	"testing"
	"time"
)

func TestReport(t *testing.T) {
	var b strings.Builder
	report(&b, []detection{
		{name: "thrashing_state=2", after: 2 * time.Second, fired: true},
		{name: "psi some avg10 > 10%", after: 5 * time.Second, fired: true},
		{name: "node_exporter-style rule", fired: false},
	}, 3*time.Minute)
	out := b.String()
	for _, want := range []string{"2s", "1.0×", "5s", "2.5×", "not within 3m0s", "> 90.0×"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
