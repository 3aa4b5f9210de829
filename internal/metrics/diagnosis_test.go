package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
)

type openDiagnoses []diagnosis.Diagnosis

func (o openDiagnoses) Open() []diagnosis.Diagnosis { return o }

func (openDiagnoses) CPUSeconds() float64 { return 1.25 }

// One shortfall and one info series per open diagnosis, none without.
func TestDiagnosisSeries(t *testing.T) {
	d := diagnosis.Diagnosis{Group: "/app", Labels: map[string]string{"cgroup": "/app"}, Kind: diagnosis.KindAnon, Binding: &diagnosis.Limit{Kind: diagnosis.LimitOwn, Group: "/app"},
		Shortfall: diagnosis.Shortfall{Bytes: 384 << 20}, Remedies: []diagnosis.Remedy{{Action: diagnosis.ActionRaiseLimit}}, Summary: "app needs more"}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewDiagnosisCollector(openDiagnoses{d}))
	want := `
# HELP thrashscope_diagnosis_shortfall_bytes How much more memory the limit that binds a thrashing group (or the host) would need to hold its working set, per open diagnosis (cgroup: the workload's cgroup2 path, as on its cgroup_* series; empty for the host); GET /api/v1/diagnoses has its interval.
# TYPE thrashscope_diagnosis_shortfall_bytes gauge
thrashscope_diagnosis_shortfall_bytes{binding="own",cgroup="/app",group="/app",kind="anon-swap-in"} 4.02653184e+08
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "thrashscope_diagnosis_shortfall_bytes"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(NewDiagnosisCollector(openDiagnoses{d}), "thrashscope_diagnosis_info"); n != 1 {
		t.Errorf("%d info series, want 1", n)
	}
	if n := testutil.CollectAndCount(NewDiagnosisCollector(openDiagnoses{})); n != 1 {
		t.Errorf("%d series with nothing open, want the CPU counter alone", n)
	}
	cpu := `
# HELP thrashscope_diagnosis_cpu_seconds_total CPU time the observer spent diagnosing, on the pipeline's thread (its clock read around each sample): part of process_cpu_seconds_total.
# TYPE thrashscope_diagnosis_cpu_seconds_total counter
thrashscope_diagnosis_cpu_seconds_total 1.25
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(cpu), "thrashscope_diagnosis_cpu_seconds_total"); err != nil {
		t.Error(err)
	}
}
