package diagnosis

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteText writes diagnoses as an operator reads them on a terminal: the
// summary, then each part on its own line.
func WriteText(w io.Writer, ds []Diagnosis) error {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "%s\n", d.Summary)
		when := "open since " + d.Opened.Local().Format(time.TimeOnly)
		if d.Closed != nil {
			when = fmt.Sprintf("%s to %s, ended: %s", d.Opened.Local().Format(time.TimeOnly), d.Closed.Local().Format(time.TimeOnly), d.Ended)
		}
		fmt.Fprintf(&b, "  %s\n", when)
		if l := d.Binding; l != nil {
			where := l.Group + "'s " + l.File
			if l.Kind == LimitHost {
				where = "the host's memory"
			}
			fmt.Fprintf(&b, "  binding: %s (%s), %s with %s charged\n", where, l.Kind, size(l.Bytes), size(l.UsedBytes))
			s := d.Shortfall
			fmt.Fprintf(&b, "  shortfall: %s (%s to %s), from %s\n", size(s.Bytes), size(s.LowBytes), size(s.HighBytes), s.Basis)
		} else {
			fmt.Fprintf(&b, "  binding: none (%s)\n", d.NoBinding)
		}
		if c := d.Culprit; c != nil {
			fmt.Fprintf(&b, "  culprit: %s grew %s from %s to %s, to %s\n", c.Group, size(c.GrewBytes), c.From.Local().Format(time.TimeOnly), c.To.Local().Format(time.TimeOnly), size(c.ChargeBytes))
		}
		for i, r := range d.Remedies {
			target := ""
			if r.Target != "" {
				target = " " + r.Target
			}
			fmt.Fprintf(&b, "  %d. %s%s: %s (%s confidence)\n", i+1, r.Action, target, r.Effect, r.Confidence)
		}
		for _, u := range d.Useless {
			fmt.Fprintf(&b, "  would not help: %s, %s\n", u.Action, u.Why)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
