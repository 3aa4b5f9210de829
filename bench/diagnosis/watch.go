package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/thrashscope/thrashscope/bench/internal/stack"
	"github.com/thrashscope/thrashscope/bench/internal/zram"
	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/diagnosis"
	"github.com/thrashscope/thrashscope/internal/run"
)

// Bounds the suite holds each diagnosis to.
const (
	// opensWithin: a diagnosis from the workload's thrashing.
	opensWithin = 3 * time.Second
	// shortfallWithin: the diagnosed shortfall from the truth, as a share.
	shortfallWithin = 0.20
	// endsWithin: the thrash, from the first remedy applied.
	endsWithin = 10 * time.Second
	// looksBeforeRemedy: the diagnosis read this many times on the plateau
	// before its remedy is applied, its shortfall the median of them.
	looksBeforeRemedy = 10
	// settle: the plateau's first moments are not read: the last consumer
	// is filling its region, and a process's working set is first measured
	// up to a --wss.period (10 s) and its window after it is seen (till
	// then it is left out of its group's demand).
	settle = 15 * time.Second
	// every is how often the watch reads the workload's state and the
	// diagnoses.
	every = 500 * time.Millisecond
	// A burst's diagnosis is read from burstFrom after the first consumer
	// has left (its memory and swap freed) to burstTo after the plateau's
	// end, before the last consumer leaves too, burstLooks times before
	// its first remedy is applied.
	burstFrom, burstTo = 0, 20 * time.Second
	burstLooks         = 1
)

// result is what one scenario showed, beside its truth.
type result struct {
	Scenario string `json:"scenario"`
	// The truth.
	Binding   diagnosis.LimitKind `json:"binding"`
	Shortfall int64               `json:"shortfall_bytes"`
	Remedy    diagnosis.Action    `json:"remedy"`
	// Culprit is the group that took the memory, under a shared limit;
	// Demand the consumers' regions, SharedBytes the shared limit and
	// NeighbourBytes the culprit's charge (the kernel's, the median over
	// the looks), from which the shortfall's truth is made there.
	Culprit    string `json:"culprit,omitempty"`
	Demand     int64  `json:"demand_bytes"`
	LimitBytes int64  `json:"limit_bytes"`
	// WantLooks is how many looks the diagnosis is read before its
	// remedy (0: looksBeforeRemedy).
	WantLooks      int   `json:"want_looks,omitempty"`
	SharedBytes    int64 `json:"shared_limit_bytes,omitempty"`
	NeighbourBytes int64 `json:"neighbour_bytes,omitempty"`
	// What the diagnosis said: the binding limit's kind and group at its
	// last look, the shortfall's median over the looks, the first remedy
	// and what it ruled out.
	Opened       time.Duration    `json:"opened_after_thrashing"`
	GotBinding   string           `json:"got_binding"`
	BindingRight bool             `json:"binding_right"`
	GotShortfall int64            `json:"got_shortfall_bytes"`
	Looks        int              `json:"looks"`
	GotRemedy    diagnosis.Remedy `json:"got_remedy"`
	GotCulprit   string           `json:"got_culprit,omitempty"`
	// GotTook is how much the diagnosis says the culprit grew by; Took
	// the truth, what it took of the consumers' demand: its charge less
	// the room the shared limit left beside their regions.
	GotTook int64               `json:"got_culprit_grew_bytes,omitempty"`
	Took    int64               `json:"culprit_took_bytes,omitempty"`
	Useless []diagnosis.Useless `json:"useless,omitempty"`
	// Compressible is the truth: the consumers' pages compress (zeros)
	// or not (random); GotRemedies every remedy the diagnosis advised.
	Compressible bool `json:"compressible"`
	// DeviceBound is the truth that the swap device holds the swap-ins
	// back (the run's own I/O limit): a faster device must be advised.
	DeviceBound bool               `json:"device_bound,omitempty"`
	GotRemedies []diagnosis.Action `json:"got_remedies,omitempty"`
	Summary     string             `json:"summary"`
	// Kind and Evidence are the diagnosis's at its last look: the swap
	// disk's busy share, the pool's fill, the compression sample.
	Kind     diagnosis.Kind     `json:"kind"`
	Evidence diagnosis.Evidence `json:"evidence"`
	// Tried are the ruled-out remedies the suite applied before the first.
	Tried []trial `json:"tried,omitempty"`
	// The remedy applied: how long until the workload left thrashing (0:
	// it did not), and whether it stayed out to the plateau's end.
	EndedAfter  time.Duration `json:"ended_after"`
	StayedEnded bool          `json:"stayed_ended"`
	// EndedBy is what the diagnosis closed by the remedy says ended it.
	EndedBy string `json:"ended_by,omitempty"`
	// Peer, where set, is the peer that sized the group instead of the
	// diagnosis's first remedy (--peer): the run's own limit when it
	// started, when the thrash first ended (0: it did not), and at the
	// plateau's end.
	Peer           string `json:"peer,omitempty"`
	PeerFromBytes  int64  `json:"peer_from_bytes,omitempty"`
	PeerEndedBytes int64  `json:"peer_ended_bytes,omitempty"`
	PeerFinalBytes int64  `json:"peer_final_bytes,omitempty"`
	Err            string `json:"error,omitempty"`
}

// trial is a ruled-out remedy applied for uselessFor: whether the workload
// left thrashing meanwhile (it should not have).
type trial struct {
	Action  diagnosis.Action `json:"action"`
	EndedIt bool             `json:"ended_it"`
}

// watch is one scenario's run followed from its start to its plateau's end.
type watch struct {
	st    *stack.Stack
	group string // the run's cgroup, as the workload's cgroup label ends
	// binds is how the truth's binding limit's group ends: the run's
	// own, or the shared parent's.
	binds string
	sh    *sharedLimit // nil but for a shared-limit scenario
	res   *result

	thrashing, opened, applied time.Time
	shortfalls                 []int64
	last                       *diagnosis.Diagnosis
	again                      bool // thrashing again after it ended
	// neighbourCharges are the neighbour's charge at each look: the
	// truth's room is the shared limit less it.
	neighbourCharges []int64
	// peer sizes the group in place of the first remedy, once started.
	peer   string
	senpai *senpai
}

// induce runs the scenario on the stack and fills its result.
func induce(ctx context.Context, st *stack.Stack, s scenario, sh *sharedLimit, peer string, logf func(string, ...any)) (*result, error) {
	res := &result{Scenario: s.name, Binding: s.binding, Shortfall: s.short(), Remedy: s.remedy, Demand: s.demand(), SharedBytes: s.shared, LimitBytes: s.limit, Compressible: s.compressible(), DeviceBound: s.device != "", Peer: peer}
	rec, abort, err := st.StartRun(s.spec())
	if err != nil {
		return res, err
	}
	defer abort()
	w := &watch{st: st, group: "/" + cgroup.Prefix + "run-" + rec.ID, sh: sh, res: res, peer: peer}
	w.binds = w.group
	pf, pt := rec.Spec.Plateau()
	from, to := rec.StartedAt.Add(pf+settle), rec.StartedAt.Add(pt)
	if sh != nil {
		w.binds, res.Culprit = "/"+filepath.Base(sh.parent.Path), "/"+filepath.Base(sh.group.Path)
		// The neighbour grows from the plateau's start, so that the
		// settle above sees it grown.
		from = rec.StartedAt.Add(pf + settle + time.Duration(sh.size/neighbourStep)*neighbourEvery)
	}
	if s.burst {
		// Read from when the first consumer has left: it finishes the
		// cycle it is in at its planned end, seconds later under a thrash.
		from, to = rec.StartedAt.Add(pt+burstTo), rec.StartedAt.Add(pt+burstTo)
		res.WantLooks = burstLooks
	}
	logf("run %s: %s; read from %s to %s", rec.ID, s.spec(), from.Sub(rec.StartedAt), to.Sub(rec.StartedAt))
	for now := time.Now(); now.Before(to); now = time.Now() {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if sh != nil && sh.n == nil && now.After(rec.StartedAt.Add(pf)) {
			logf("the neighbour grows to %d MiB under the shared %s", sh.size>>20, sh.parent.Path)
			if err := sh.start(); err != nil {
				return res, fmt.Errorf("starting the neighbour: %w", err)
			}
		}
		if s.burst && from.Equal(to) && now.After(rec.StartedAt.Add(pt)) {
			left, err := oneLeft(st, rec.ID)
			if err != nil {
				return res, err
			}
			if left {
				from = now.Add(burstFrom)
				logf("a consumer has left %s into the run: the diagnosis read from %s", now.Sub(rec.StartedAt).Round(time.Second), from.Sub(rec.StartedAt).Round(time.Second))
			}
		}
		if err := w.look(now, now.After(from) && now.Before(to)); err != nil {
			return res, err
		}
		if err := w.remedy(ctx, s, logf); err != nil {
			return res, err
		}
		if err := w.peerTick(logf); err != nil {
			return res, err
		}
		time.Sleep(every)
	}
	w.finish()
	return res, nil
}

// remedy applies the diagnosis's first remedy once it has been read enough
// times, after trying those it ruled out (but on a burst, which ends by
// itself meanwhile).
func (w *watch) remedy(ctx context.Context, s scenario, logf func(string, ...any)) error {
	if !w.applied.IsZero() || len(w.shortfalls) < w.res.wantLooks() || len(w.last.Remedies) == 0 {
		return nil
	}
	if w.peer != "" {
		return w.startPeer(logf)
	}
	if !s.burst {
		if err := w.tryUseless(ctx, logf); err != nil {
			return err
		}
	}
	return w.apply(logf)
}

// peerTick applies the peer's rule, once it has started.
func (w *watch) peerTick(logf func(string, ...any)) error {
	if w.senpai == nil {
		return nil
	}
	changed, err := w.senpai.tick(time.Now())
	if err != nil {
		return fmt.Errorf("senpai's rule: %w", err)
	}
	if changed {
		logf("senpai's rule: the limit now %d MiB", w.senpai.limit>>20)
	}
	return nil
}

// startPeer starts the peer on the run's own limit, at the moment the
// diagnosis's first remedy would have been applied.
func (w *watch) startPeer(logf func(string, ...any)) error {
	if w.peer != "senpai" || w.last.Binding == nil {
		return fmt.Errorf("peer %q: the suite runs senpai's rule, on a diagnosis with a binding limit", w.peer)
	}
	file, err := limitFile(w.last.Group, w.last.Binding.File)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	from, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if w.senpai, err = newSenpai(file, w.last.Labels["cgroup"], from); err != nil {
		return err
	}
	w.applied, w.res.PeerFromBytes = time.Now(), from
	logf("senpai's rule on %s, from %d MiB", file, from>>20)
	return nil
}

// oneLeft says whether a consumer of the run has ended.
func oneLeft(st *stack.Stack, id string) (bool, error) {
	rec, err := st.Run(id)
	if err != nil {
		return false, fmt.Errorf("reading run %s: %w", id, err)
	}
	return slices.ContainsFunc(rec.Consumers, func(c run.ConsumerRecord) bool { return c.Exit != "" }), nil
}

// thrashingNow says whether the workload's detector reads thrashing.
func (w *watch) thrashingNow() (bool, error) {
	state := -1.0
	err := w.st.Scrape(func(line string) {
		rest, ok := strings.CutPrefix(line, "thrashscope_cgroup_thrashing_state{")
		if !ok || !strings.Contains(rest, w.group+`"`) {
			return
		}
		if i := strings.LastIndexByte(rest, ' '); i > 0 {
			state, _ = strconv.ParseFloat(rest[i+1:], 64)
		}
	})
	if err != nil {
		return false, fmt.Errorf("scraping the observer: %w", err)
	}
	return state == 2, nil
}

// look reads the workload's state and its open diagnosis once.
func (w *watch) look(now time.Time, plateau bool) error {
	thrashing, err := w.thrashingNow()
	if err != nil {
		return err
	}
	if thrashing && w.thrashing.IsZero() {
		w.thrashing = now
	}
	if !w.applied.IsZero() {
		switch {
		case !thrashing && w.res.EndedAfter == 0:
			w.res.EndedAfter = now.Sub(w.applied)
			if w.senpai != nil {
				w.res.PeerEndedBytes = w.senpai.limit
			}
		case thrashing && w.res.EndedAfter > 0:
			w.again = true
		}
		if w.res.EndedAfter > 0 && w.res.EndedBy == "" {
			_, err := w.diagnosis() // the closed one's ended_by
			return err
		}
		return nil
	}
	dg, err := w.diagnosis()
	if err != nil || dg == nil {
		return err
	}
	if w.opened.IsZero() {
		w.opened = now
	}
	w.last = dg
	if plateau {
		w.shortfalls = append(w.shortfalls, dg.Shortfall.Bytes)
		if w.sh != nil {
			c, err := w.sh.charge()
			if err != nil {
				return fmt.Errorf("the neighbour's charge: %w", err)
			}
			w.neighbourCharges = append(w.neighbourCharges, c)
		}
	}
	return nil
}

// diagnosis is the run's open diagnosis, nil when none is open.
func (w *watch) diagnosis() (*diagnosis.Diagnosis, error) {
	r, err := http.Get("http://" + w.st.ObserverAddr + "/api/v1/diagnoses")
	if err != nil {
		return nil, fmt.Errorf("reading the diagnoses: %w", err)
	}
	defer r.Body.Close()
	if r.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/v1/diagnoses: %s", r.Status)
	}
	var l struct{ Open, Closed []diagnosis.Diagnosis }
	if err := json.NewDecoder(r.Body).Decode(&l); err != nil {
		return nil, fmt.Errorf("GET /api/v1/diagnoses: %w", err)
	}
	for _, dg := range l.Closed {
		if strings.HasSuffix(dg.Labels["cgroup"], w.group) && !w.applied.IsZero() && dg.Closed != nil && !dg.Closed.Before(w.applied) && w.res.EndedBy == "" {
			w.res.EndedBy = dg.Ended
		}
	}
	for _, dg := range l.Open {
		if strings.HasSuffix(dg.Labels["cgroup"], w.group) {
			return &dg, nil
		}
	}
	return nil, nil
}

// apply carries out the diagnosis's first remedy: the suite knows how to
// raise a limit of the run's own group (which the observer made), and
// nothing else, which it says.
func (w *watch) apply(logf func(string, ...any)) error {
	first := w.last.Remedies[0]
	w.applied = time.Now()
	switch {
	case first.Action == diagnosis.ActionRaiseLimit && w.last.Binding != nil && strings.HasSuffix(first.Target, w.group):
		file, err := limitFile(first.Target, w.last.Binding.File)
		if err != nil {
			return err
		}
		logf("applying %s: %s set to %d MiB (%s)", first.Action, file, first.Bytes>>20, first.Effect)
		return os.WriteFile(file, []byte(strconv.FormatInt(first.Bytes, 10)), 0)
	case first.Action == diagnosis.ActionWait:
		logf("applying %s: nothing done (%s)", first.Action, first.Effect)
		return nil
	case first.Action == diagnosis.ActionLimitCulprit && w.sh != nil && strings.HasSuffix(first.Target, w.res.Culprit):
		logf("applying %s: the neighbour %s stopped (%s)", first.Action, first.Target, first.Effect)
		w.sh.n.stop()
		return nil
	default:
		logf("the first remedy, %s on %q, is not one the suite applies: nothing done", first.Action, first.Target)
		return nil
	}
}

// uselessFor is how long a remedy the diagnosis ruled out is tried.
const uselessFor = 10 * time.Second

// tryUseless tries, for uselessFor each, the remedies the diagnosis ruled
// out that the suite knows how to apply (compressed swap: a zram device
// made swap ahead of the host's), and notes whether the workload left
// thrashing meanwhile; each is undone before the next.
func (w *watch) tryUseless(ctx context.Context, logf func(string, ...any)) error {
	for _, u := range w.last.Useless {
		if u.Action != diagnosis.ActionCompressedSwap {
			continue
		}
		undo, err := zram.Swap()
		if err != nil {
			return fmt.Errorf("trying %s, ruled out: %w", u.Action, err)
		}
		logf("trying %s, ruled out (%s), for %s", u.Action, u.Why, uselessFor)
		t := trial{Action: u.Action}
		for end := time.Now().Add(uselessFor); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(every) {
			thrashing, err := w.thrashingNow()
			if err != nil {
				return errors.Join(err, undo())
			}
			t.EndedIt = t.EndedIt || !thrashing
		}
		w.res.Tried = append(w.res.Tried, t)
		if err := undo(); err != nil {
			return err
		}
	}
	return nil
}

// limitFile is the file of a limit of group, a path from the root of the
// hierarchy holding the memory controller: v1's where memory is there.
func limitFile(group, name string) (string, error) {
	if strings.Contains(group, "..") || strings.ContainsRune(name, '/') {
		return "", fmt.Errorf("limit %q of %q: not a file of a group", name, group)
	}
	if mount, ok := cgroup.V1MemoryMount("/proc"); ok {
		return filepath.Join(mount, group, name), nil
	}
	h, err := cgroup.UnifiedHierarchy("/proc")
	if err != nil {
		return "", err
	}
	return filepath.Join(h.Dir(group), name), nil
}

// finish fills the result from what the watch saw.
func (w *watch) finish() {
	r := w.res
	switch {
	case w.thrashing.IsZero():
		r.Err = "the workload never read thrashing"
		return
	case w.last == nil:
		r.Err = "no diagnosis of the run's group opened"
		return
	}
	r.Opened = w.opened.Sub(w.thrashing)
	if b := w.last.Binding; b != nil {
		r.GotBinding = string(b.Kind) + " " + b.Group
		r.BindingRight = b.Kind == r.Binding && strings.HasSuffix(b.Group, w.binds)
	} else {
		r.GotBinding = "none: " + w.last.NoBinding
	}
	r.Looks = len(w.shortfalls)
	if r.Looks > 0 {
		r.GotShortfall = median(w.shortfalls)
	}
	if len(w.neighbourCharges) > 0 {
		// Under a shared limit the truth's room is what the kernel says
		// the neighbour holds beside the consumers: its locked pages and
		// its own runtime's.
		r.NeighbourBytes = median(w.neighbourCharges)
		r.Shortfall = r.Demand - (r.SharedBytes - r.NeighbourBytes)
		r.Took = r.NeighbourBytes - (r.SharedBytes - r.Demand)
	}
	if len(w.last.Remedies) > 0 {
		r.GotRemedy = w.last.Remedies[0]
	}
	for _, rm := range w.last.Remedies {
		r.GotRemedies = append(r.GotRemedies, rm.Action)
	}
	if c := w.last.Culprit; c != nil {
		r.GotCulprit, r.GotTook = c.Group, c.GrewBytes
	}
	r.Useless, r.Summary, r.Kind, r.Evidence = w.last.Useless, w.last.Summary, w.last.Kind, w.last.Evidence
	r.StayedEnded = r.EndedAfter > 0 && !w.again
	if w.senpai != nil {
		r.PeerFinalBytes = w.senpai.limit
	}
}

func median(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// problems says where a result fails the truth or the bounds.
func (r *result) problems() []string {
	if r.Err != "" {
		return []string{r.Scenario + ": " + r.Err}
	}
	if r.Peer != "" {
		return nil // a peer's answer is shown beside the truth, not judged
	}
	var p []string
	add := func(format string, args ...any) { p = append(p, r.Scenario+": "+fmt.Sprintf(format, args...)) }
	if r.Opened > opensWithin {
		add("the diagnosis opened %s after the workload read thrashing, want within %s", r.Opened.Round(100*time.Millisecond), opensWithin)
	}
	if !r.BindingRight {
		add("binding %q, want the %s limit", r.GotBinding, r.Binding)
	}
	if r.Culprit != "" && !strings.HasSuffix(r.GotCulprit, r.Culprit) {
		add("culprit %q, want the neighbour %s", r.GotCulprit, r.Culprit)
	} else if off := float64(r.GotTook)/float64(r.Took) - 1; r.Culprit != "" && (off < -shortfallWithin || off > shortfallWithin) {
		add("the culprit grew by %d MiB, %+.0f %% from the %d MiB it took of the consumers' demand (want within ±%.0f %%)", r.GotTook>>20, 100*off, r.Took>>20, 100*shortfallWithin)
	}
	switch off := r.shortfallOff(); {
	case r.Looks < r.wantLooks():
		add("%d looks at the diagnosis while it thrashed, want %d", r.Looks, r.wantLooks())
	case r.Shortfall == 0 && off > shortfallWithin:
		add("shortfall %d MiB, %.0f %% of the limit, where nothing is short (want within %.0f %% of it)", r.GotShortfall>>20, 100*off, 100*shortfallWithin)
	case r.Shortfall != 0 && (off < -shortfallWithin || off > shortfallWithin):
		add("shortfall %d MiB, %+.0f %% from the truth %d MiB (want within ±%.0f %%)", r.GotShortfall>>20, 100*off, r.Shortfall>>20, 100*shortfallWithin)
	}
	for _, t := range r.Tried {
		if t.EndedIt {
			add("%s, ruled out, ended the thrash when tried", t.Action)
		}
	}
	if r.GotRemedy.Action != r.Remedy {
		add("first remedy %s, want %s", r.GotRemedy.Action, r.Remedy)
	}
	r.advisedProblems(add)
	switch {
	case r.EndedAfter == 0:
		add("the thrash did not end once %s was applied", r.GotRemedy.Action)
	case r.EndedAfter > endsWithin:
		add("the thrash ended %s after %s was applied, want within %s", r.EndedAfter.Round(100*time.Millisecond), r.GotRemedy.Action, endsWithin)
	case !r.StayedEnded:
		add("the thrash came back after %s had ended it", r.GotRemedy.Action)
	}
	if want := endedByWords[r.GotRemedy.Action]; r.EndedAfter > 0 && want != "" && !strings.Contains(r.EndedBy, want) {
		add("the closed diagnosis says %q ended it, want it to name the remedy applied (%q)", r.EndedBy, want)
	}
	return p
}

// advisedProblems holds what the diagnosis advised beside its first
// remedy to the truth: compressed swap for pages that compress and not
// for random ones, a faster device where the run's own I/O limit holds
// its swap-ins back.
func (r *result) advisedProblems(add func(string, ...any)) {
	if r.Kind == diagnosis.KindAnon && r.GotRemedy.Action != diagnosis.ActionWait {
		advised := slices.Contains(r.GotRemedies, diagnosis.ActionCompressedSwap)
		ruledOut := slices.ContainsFunc(r.Useless, func(u diagnosis.Useless) bool { return u.Action == diagnosis.ActionCompressedSwap })
		switch {
		case r.Compressible && !advised:
			add("compressed swap not advised for pages that compress (sampled %.1f:1)", r.Evidence.CompressRatio)
		case !r.Compressible && !ruledOut:
			add("compressed swap not ruled out for random pages (sampled %.1f:1)", r.Evidence.CompressRatio)
		}
	}
	if r.DeviceBound && !slices.Contains(r.GotRemedies, diagnosis.ActionFasterDevice) {
		add("a faster device not advised where the run's own I/O limit holds its swap-ins back (%.0f %% of %q used)", r.Evidence.IOLimitPercent, r.Evidence.IOLimit)
	}
}

// endedByWords is what a closed diagnosis's ended_by says once the suite
// applied each remedy: the limit it raised, the neighbour it stopped, the
// consumer that left while it waited.
var endedByWords = map[diagnosis.Action]string{
	diagnosis.ActionRaiseLimit:   "changed from",
	diagnosis.ActionLimitCulprit: "thrashscope-bench-neighbour",
	diagnosis.ActionWait:         "processes exited", // the burst's first consumer
}

// shortfallOff is the diagnosed shortfall's error, as a share of the
// truth; where the truth is that nothing is short, as a share of the limit.
func (r *result) shortfallOff() float64 {
	if r.Shortfall == 0 {
		return float64(r.GotShortfall) / float64(max(r.LimitBytes, 1))
	}
	return float64(r.GotShortfall)/float64(r.Shortfall) - 1
}

// wantLooks is how many looks the result needs before its remedy.
func (r *result) wantLooks() int {
	if r.WantLooks > 0 {
		return r.WantLooks
	}
	return looksBeforeRemedy
}
