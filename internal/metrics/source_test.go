package metrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/pipeline"
	"github.com/thrashscope/thrashscope/internal/procfs"
	"github.com/thrashscope/thrashscope/internal/sampler"
)

// A source that fails sends nothing for that scrape: its counters read as
// 0 would be a counter reset to Prometheus. The defect: --path.procfs at a
// copy whose vmstat and stat were emptied or removed for 2 s exported
// swap_in_pages_total and cpu_seconds_total as 0, then jumped back.
func TestAFailedSourceSendsNothing(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("../procfs/testdata/proc")); err != nil {
		t.Fatal(err)
	}
	vmstat, _ := os.ReadFile(filepath.Join(root, "vmstat"))
	fs, _ := procfs.NewFS(root)
	line := pipeline.New(pipeline.Config{Sampler: sampler.New(sampler.Config{ProcFS: fs, TopK: 5})})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(line))
	scrape := func() string {
		t.Helper()
		_ = line.Step()
		var b strings.Builder
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				b.WriteString(mf.GetName())
				for _, l := range m.GetLabel() {
					b.WriteString(" " + l.GetName() + "=" + l.GetValue())
				}
				b.WriteString("\n")
			}
		}
		return b.String()
	}
	has := func(out, series string) bool { return strings.Contains(out, series+"\n") }

	out := scrape()
	for _, s := range []string{"thrashscope_swap_in_pages_total", "thrashscope_cpu_seconds_total mode=user", "thrashscope_source_success source=vmstat"} {
		if !has(out, s) {
			t.Fatalf("a whole reading lacks %s:\n%s", s, out)
		}
	}

	os.WriteFile(filepath.Join(root, "vmstat"), nil, 0o644) // emptied
	os.Remove(filepath.Join(root, "stat"))                  // vanished
	out = scrape()
	for _, s := range []string{"thrashscope_swap_in_pages_total", "thrashscope_major_faults_total", "thrashscope_page_faults_total", "thrashscope_cpu_seconds_total mode=user"} {
		if has(out, s) {
			t.Errorf("%s was sent while its source failed", s)
		}
	}
	if !has(out, "thrashscope_memory_available_bytes") {
		t.Error("meminfo was read, but its series went too")
	}
	if v := valueOf(t, reg, "thrashscope_source_success", "vmstat"); v != 0 {
		t.Errorf("source_success{source=vmstat} = %g, want 0", v)
	}
	_ = scrape()
	if v := valueOf(t, reg, "thrashscope_source_failures_total", "stat"); v != 2 {
		t.Errorf("source_failures_total{source=stat} = %g after two failed reads, want 2", v)
	}

	os.WriteFile(filepath.Join(root, "vmstat"), vmstat, 0o644)
	os.CopyFS(filepath.Join(root, "again"), os.DirFS("../procfs/testdata/proc"))
	os.Rename(filepath.Join(root, "again", "stat"), filepath.Join(root, "stat"))
	out = scrape()
	if !has(out, "thrashscope_swap_in_pages_total") || !has(out, "thrashscope_cpu_seconds_total mode=user") {
		t.Errorf("the sources read again, but their series did not come back:\n%s", out)
	}
	if v := valueOf(t, reg, "thrashscope_source_success", "vmstat"); v != 1 {
		t.Errorf("source_success{source=vmstat} = %g after it read again, want 1", v)
	}
}

// valueOf is one series of a gathered family, by its source label.
func valueOf(t *testing.T, reg *prometheus.Registry, name, source string) float64 {
	t.Helper()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == source {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{source=%q}", name, source)
	return 0
}
