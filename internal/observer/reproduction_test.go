package observer

import (
	"fmt"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/findings"
	"github.com/thrashscope/thrashscope/internal/loadgen"
	"github.com/thrashscope/thrashscope/internal/report"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// compressedScale keeps the run small while the consumers' own locked
// runtime pages (about 1.6 MiB each, 40 MiB for 25) stay under a tenth of
// the limit; on cgroup v1 the OOM guard keeps every consumer alive.
const compressedScale = 0.5

// TestReproductionCompressed runs e2 and e3 of Maziero et al. (2013) through
// the real observer on a compressed timeline (t_c = 3 s: 160 s a run instead
// of 1510 s), and checks the two findings that must survive compression, by
// the same rules as the full-length reproduction: e3's paging over the
// plateau is below e2's (a longer t_s relieves the thrash), and both peak
// while every consumer is active.
func TestReproductionCompressed(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	d := startDaemon(t, t.TempDir())
	m := map[string]findings.Measures{}
	for _, preset := range []string{"e2", "e3"} {
		rec := d.startRun(t, fmt.Sprintf(`{"preset":%q,"scale":%g,"interval":"3s"}`, preset, compressedScale))
		waitFor(t, rec.Spec.Duration()+2*time.Minute, preset+" to end", func() bool {
			time.Sleep(time.Second)
			return !loadgen.Active(d.record(t, rec.ID).State)
		})
		final := d.record(t, rec.ID)
		if final.State != loadgen.StateCompleted {
			t.Fatalf("%s ended %s: %s", preset, final.State, final.Reason)
		}
		if n := ooms(final); n > 0 {
			t.Errorf("%s lost %d consumers to the OOM killer: a run short of demand is not the experiment", preset, n)
		}
		runs, err := report.Load(d.dataDir, []string{rec.ID})
		if err != nil {
			t.Fatal(err)
		}
		m[preset] = findings.Measure(runs[0])
		t.Logf("%s: plateau [%.0f, %.0f] s, mean %.0f swap-ins/s over it, smoothed peak at %.1f s, %d OOM rescues",
			preset, m[preset].PlateauFrom, m[preset].PlateauTo, m[preset].PlateauMean, m[preset].PeakAt, final.OOMRescues)
	}
	if e2, e3 := m["e2"].PlateauMean, m["e3"].PlateauMean; !(e3 < e2) {
		t.Errorf("e3 pages %.0f swap-ins/s over the plateau, e2 %.0f: want e3 below e2", e3, e2)
	}
	for _, p := range []string{"e2", "e3"} {
		if !m[p].PeaksOnPlateau() {
			t.Errorf("%s peaks at %.1f s, outside the plateau [%.0f, %.0f] s ± t_c", p, m[p].PeakAt, m[p].PlateauFrom, m[p].PlateauTo)
		}
	}
}
