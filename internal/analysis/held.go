package analysis

import "github.com/thrashscope/thrashscope/internal/run"

// HeldSpans are the times, in seconds since the run started, that the
// run's policy held consumer i (protected, or frozen), from the record's
// decisions that acted; a hold still on at the end lasts to end. How is
// "protected" or "frozen", empty when it was never held.
func HeldSpans(rec run.Record, i int, end float64) (spans [][2]float64, how string) {
	from, held := 0.0, false
	for _, d := range rec.Decisions {
		if d.Consumer != i || d.Error != "" {
			continue
		}
		at := d.At.Sub(rec.StartedAt).Seconds()
		switch d.Kind {
		case "protect", "freeze":
			if !held {
				from, held = at, true
			}
			how = map[string]string{"protect": "protected", "freeze": "frozen"}[d.Kind]
		case "release", "thaw":
			if held {
				spans, held = append(spans, [2]float64{from, at}), false
			}
		}
	}
	if held {
		spans = append(spans, [2]float64{from, max(from, end)})
	}
	return spans, how
}
