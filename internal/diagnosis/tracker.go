package diagnosis

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Sample is one group's readings at one sample, as the observer hands them
// in: the group's detector state and everything a diagnosis weighs.
type Sample struct {
	// Group is the cgroup path; "" is the host.
	Group  string            `json:"group"`
	Labels map[string]string `json:"labels,omitempty"`
	// Thrashing is its detector's state at thrashing.
	Thrashing bool
	Limits    []Limit
	Host      Host
	Demand    Demand
	Evidence  Evidence
	// Growth is how the charges of the groups that may share its limits
	// (siblings, the host's workloads) moved over the recent past, for
	// the culprit (GrowthOf).
	Growth map[string]Growth
	// NoSwap: the group may not swap at all (its own or an ancestor's
	// memory.swap.max is 0, as Kubernetes' LimitedSwap sets it for
	// Guaranteed and BestEffort pods).
	NoSwap bool
	// Processes is how many live processes it holds, and OOMKills its
	// OOM kills so far.
	Processes int
	OOMKills  uint64
}

// Diagnosis is one thrash of one group, from the sample its detector
// reached thrashing to the one it left.
type Diagnosis struct {
	ID     string            `json:"id"`
	Group  string            `json:"group"`
	Labels map[string]string `json:"labels,omitempty"`
	Opened time.Time         `json:"opened"`
	// Updated is its last sample's time; Closed is set once it ended, with
	// Ended saying what ended it.
	Updated time.Time  `json:"updated"`
	Closed  *time.Time `json:"closed,omitempty"`
	Ended   string     `json:"ended,omitempty"`

	Kind     Kind     `json:"kind"`
	Evidence Evidence `json:"evidence"`
	// Binding is the limit that binds; nil when none does (NoBinding says
	// why).
	Binding   *Limit    `json:"binding,omitempty"`
	NoBinding string    `json:"no_binding,omitempty"`
	Demand    Demand    `json:"demand"`
	Shortfall Shortfall `json:"shortfall"`
	// PeakShortfall is the largest shortfall over its life.
	PeakShortfall int64     `json:"peak_shortfall_bytes"`
	Culprit       *Culprit  `json:"culprit,omitempty"`
	Remedies      []Remedy  `json:"remedies"`
	Useless       []Useless `json:"useless,omitempty"`
	// Summary is the diagnosis in one line, for an alert's annotation.
	Summary string `json:"summary"`

	last Sample // the sample it was last updated from
	// bound is the limit that bound it as it was when it first bound: a
	// limit raised while the group still thrashes is read in the update
	// after, and what ended the thrash is its change from this.
	bound *Limit
	// named is the last culprit it named: one that gives back what it
	// took is no culprit in the update after, while the group still
	// thrashes, and what ended the thrash is its giving back.
	named *Culprit
	// most is the most processes it held, and peak its largest working
	// set, over its life: a process that leaves ends a burst a sample or
	// two before the group stops thrashing.
	most int
	peak int64
}

// trendWindow is how far back the demand's trend is read.
const trendWindow = 30 * time.Second

// Tracker keeps the open diagnoses, one per thrashing group. Not safe for
// concurrent use: the pipeline updates it once a sample.
type Tracker struct {
	open    map[string]*Diagnosis
	demands map[string][]Point // each open group's recent footprint, for its trend
	seq     uint64
}

// NewTracker returns a Tracker with nothing open.
func NewTracker() *Tracker {
	return &Tracker{open: map[string]*Diagnosis{}, demands: map[string][]Point{}}
}

// Update takes a sample of every group the observer follows at now: a
// group at thrashing opens a diagnosis or updates its own, and an open one
// whose group is no longer thrashing, or is gone, is closed. It returns
// the diagnoses closed by this sample.
func (t *Tracker) Update(now time.Time, samples []Sample) []Diagnosis {
	seen := map[string]bool{}
	var closed []Diagnosis
	for _, s := range samples {
		seen[s.Group] = true
		d, ok := t.open[s.Group]
		switch {
		case s.Thrashing && !ok:
			t.seq++
			d = &Diagnosis{ID: fmt.Sprintf("%d-%d", now.Unix(), t.seq), Group: s.Group, Opened: now}
			t.open[s.Group] = d
			fallthrough
		case s.Thrashing:
			t.demands[s.Group] = appendPoint(t.demands[s.Group], now, s.Demand.footprint())
			d.update(now, s, trendOf(t.demands[s.Group]))
		case ok:
			closed = append(closed, t.close(d, now, endedBy(d, &s)))
		}
	}
	for g, d := range t.open {
		if !seen[g] {
			closed = append(closed, t.close(d, now, endedBy(d, nil)))
		}
	}
	return closed
}

// Open is the open diagnoses, by group.
func (t *Tracker) Open() []Diagnosis {
	out := make([]Diagnosis, 0, len(t.open))
	for _, g := range slices.Sorted(maps.Keys(t.open)) {
		out = append(out, *t.open[g])
	}
	return out
}

func (t *Tracker) close(d *Diagnosis, now time.Time, ended string) Diagnosis {
	delete(t.open, d.Group)
	delete(t.demands, d.Group)
	d.Closed, d.Ended = &now, ended
	return *d
}

// appendPoint keeps the demand's points within trendWindow.
func appendPoint(ps []Point, at time.Time, b int64) []Point {
	if b < 0 {
		return ps
	}
	ps = append(ps, Point{At: at, Bytes: b})
	i := slices.IndexFunc(ps, func(p Point) bool { return at.Sub(p.At) <= trendWindow })
	return ps[i:]
}

// trendOf is how much the footprint fell from its peak in the window to
// now.
func trendOf(ps []Point) Trend {
	if len(ps) < 2 {
		return Trend{}
	}
	peak := slices.MaxFunc(ps, func(a, b Point) int { return cmp.Compare(a.Bytes, b.Bytes) })
	last := ps[len(ps)-1]
	return Trend{FellBytes: peak.Bytes - last.Bytes, Over: last.At.Sub(peak.At)}
}

// update diagnoses d afresh from the sample s.
func (d *Diagnosis) update(now time.Time, s Sample, trend Trend) {
	d.Updated, d.Labels, d.last = now, s.Labels, s
	d.most, d.peak = max(d.most, s.Processes), max(d.peak, s.Demand.WorkingSetBytes)
	d.Kind, d.Evidence, d.Demand = KindOf(s.Evidence), s.Evidence, s.Demand
	l, err := Binding(s.Limits, s.Host)
	if err != nil && d.Binding != nil {
		// The limit that bound it still holds it while it thrashes: a
		// charge that falls back from a limit as processes end or pages
		// go out does not end the thrash the limit made.
		if i := slices.IndexFunc(s.Limits, func(x Limit) bool { return x.Group == d.Binding.Group && x.File == d.Binding.File }); i >= 0 {
			l, err = s.Limits[i], nil
		}
	}
	if err != nil {
		d.Binding, d.NoBinding, d.Culprit = nil, err.Error(), nil
		d.Shortfall = Shortfall{}
		d.Remedies, d.Useless = nil, nil
		if errors.Is(err, ErrNoBindingLimit) && atTheCeiling(d.Evidence) {
			// No limit binds and the host has memory: what holds the
			// swap-ins back is the disk.
			d.Kind = KindDevice
			d.Remedies, d.Useless = fasterDevice(nil, nil, Context{Kind: d.Kind, Evidence: d.Evidence})
		}
		d.Summary = fmt.Sprintf("%s %s: %s; %s", name(d), d.Kind, d.Evidence.summary(d.Kind), d.NoBinding)
		return
	}
	d.Binding, d.NoBinding = &l, ""
	if b := d.bound; b == nil || b.Group != l.Group || b.File != l.File || b.Kind == LimitHost {
		first := l
		d.bound = &first
	}
	d.Shortfall = ShortfallOf(l, s.Demand)
	d.PeakShortfall = max(d.PeakShortfall, d.Shortfall.Bytes)
	d.Culprit = nil
	if c, ok := CulpritOf(l, s.Group, s.Growth); ok {
		d.Culprit, d.named = &c, &c
	}
	d.Remedies, d.Useless = Remedies(l, d.Shortfall, Context{Kind: d.Kind, Evidence: s.Evidence, Culprit: d.Culprit, Trend: trend, CompressRatio: s.Evidence.CompressRatio, NoSwap: s.NoSwap})
	d.Summary = summary(d)
}

// name is the group as the summary names it.
func name(d *Diagnosis) string {
	switch {
	case d.Group == "":
		return "host"
	case d.Labels["pod_uid"] != "" && d.Labels["qos"] != "":
		return d.Labels["qos"] + " pod " + d.Labels["pod_uid"]
	case d.Labels["pod_uid"] != "":
		return "pod " + d.Labels["pod_uid"]
	case d.Labels["unit"] != "":
		return d.Labels["unit"]
	}
	return d.Group
}

// summary is the diagnosis in one line: who, what, how much, who took it,
// and the first remedy.
func summary(d *Diagnosis) string {
	l := d.Binding
	what := "its limit"
	switch l.Kind {
	case LimitHigh:
		what = "its memory.high"
	case LimitAncestor:
		what = l.Group + "'s limit"
	case LimitHost:
		what = "the host's memory"
	}
	need := "~" + size(d.Shortfall.Bytes)
	if d.Demand.Saturated && d.Shortfall.HighBytes > d.Shortfall.Bytes {
		// Its demand is a floor: the point alone would understate it.
		need = size(d.Shortfall.Bytes) + " to " + size(d.Shortfall.HighBytes)
	}
	s := fmt.Sprintf("%s %s thrash (%s): needs %s more than %s of %s", name(d), d.Kind, d.Evidence.summary(d.Kind), need, what, size(l.Bytes))
	if c := d.Culprit; c != nil {
		s += fmt.Sprintf("; %s grew %s in %s", c.Group, size(c.GrewBytes), c.To.Sub(c.From).Round(time.Second))
	}
	if len(d.Remedies) > 0 {
		s += "; first: " + string(d.Remedies[0].Action)
		if r := d.Remedies[0]; r.Bytes > 0 {
			s += " to " + size(r.Bytes)
		}
	}
	return s
}

// endedBy says what ended d's thrash, from its last sample at thrashing
// and the first after (nil: the group is gone).
func endedBy(d *Diagnosis, now *Sample) string {
	last := d.last
	if now == nil {
		return "its group is gone: every process in it exited or was moved"
	}
	if now.OOMKills > last.OOMKills {
		return fmt.Sprintf("the OOM killer killed %d of its processes", now.OOMKills-last.OOMKills)
	}
	if most := max(d.most, last.Processes); now.Processes < most {
		return fmt.Sprintf("%d of its %d processes exited or were killed", most-now.Processes, most)
	}
	if b := d.bound; b != nil {
		for _, l := range now.Limits {
			if l.Group == b.Group && l.File == b.File && l.Bytes != b.Bytes && b.Kind != LimitHost {
				return fmt.Sprintf("%s's %s changed from %s to %s", l.Group, l.File, size(b.Bytes), size(l.Bytes))
			}
		}
		if b.Kind != LimitHost && !slices.ContainsFunc(now.Limits, func(l Limit) bool { return l.Group == b.Group && l.File == b.File }) {
			return fmt.Sprintf("%s's %s was lifted", b.Group, b.File)
		}
	}
	if c := d.named; c != nil {
		if gr, ok := now.Growth[c.Group]; ok && gr.Last.Bytes < c.ChargeBytes-c.GrewBytes/2 {
			return fmt.Sprintf("%s gave back %s", c.Group, size(c.ChargeBytes-gr.Last.Bytes))
		} else if !ok {
			return c.Group + ", which had grown into its memory, is gone"
		}
	}
	if w0, w1 := max(d.peak, last.Demand.WorkingSetBytes), now.Demand.WorkingSetBytes; w0 > 0 && w1 >= 0 && float64(w1) < 0.9*float64(w0) {
		return fmt.Sprintf("its demand fell from %s to %s", size(w0), size(w1))
	}
	return "its pressure eased with no change in its limits, processes or demand that the observer saw"
}
