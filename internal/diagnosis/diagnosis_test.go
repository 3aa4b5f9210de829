package diagnosis

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const mi = int64(1 << 20)

type dirReader struct{}

func (dirReader) ReadFileAt(dir, name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(dir, name))
}

// writeGroup makes a group's files under root.
func writeGroup(t testing.TB, root, group string, files map[string]string) {
	t.Helper()
	dir := filepath.Join(root, group)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The limits over a group are read from its own files up to the root, on
// v2 (max and high) and v1 (limit_in_bytes, its unlimited ceiling none).
func TestLimitsAreReadUpTheTree(t *testing.T) {
	root := t.TempDir()
	writeGroup(t, root, "pod", map[string]string{"memory.max": "1073741824", "memory.high": "max", "memory.current": "1000000000"})
	writeGroup(t, root, "pod/app", map[string]string{"memory.max": "max", "memory.high": "268435456", "memory.current": "268000000"})
	ls, err := Hierarchy{Mount: root, V2: true}.Limits(dirReader{}, "pod/app")
	if err != nil {
		t.Fatal(err)
	}
	want := []Limit{
		{Kind: LimitHigh, Group: "/pod/app", File: "memory.high", Bytes: 256 * mi, UsedBytes: 268000000},
		{Kind: LimitAncestor, Group: "/pod", File: "memory.max", Bytes: 1024 * mi, UsedBytes: 1000000000},
	}
	if len(ls) != len(want) || ls[0] != want[0] || ls[1] != want[1] {
		t.Errorf("limits %+v, want %+v", ls, want)
	}

	v1 := t.TempDir()
	writeGroup(t, v1, "a", map[string]string{"memory.limit_in_bytes": "9223372036854771712", "memory.usage_in_bytes": "5"})
	writeGroup(t, v1, "a/b", map[string]string{"memory.limit_in_bytes": "104857600", "memory.usage_in_bytes": "104000000"})
	ls, err = Hierarchy{Mount: v1}.Limits(dirReader{}, "/a/b")
	if err != nil || len(ls) != 1 || ls[0].Kind != LimitOwn || ls[0].Bytes != 100*mi {
		t.Errorf("v1 limits %+v, %v; want only a/b's own 100 MiB", ls, err)
	}

	if _, err := (Hierarchy{Mount: root, V2: true}).Limits(dirReader{}, "pod/gone"); err == nil || !strings.Contains(err.Error(), "memory.max") {
		t.Errorf("a group without files: %v, want an error naming the file", err)
	}
	writeGroup(t, root, "bad", map[string]string{"memory.max": "lots", "memory.high": "max", "memory.current": "1"})
	if _, err := (Hierarchy{Mount: root, V2: true}).Limits(dirReader{}, "bad"); err == nil || !strings.Contains(err.Error(), "not a byte count") {
		t.Errorf("a limit that is not a number: %v", err)
	}
}

// The binding limit is the one with the least room among those the charge
// is at; the host's when none is and the host has little available.
func TestBinding(t *testing.T) {
	own := Limit{Kind: LimitOwn, Group: "/a", File: "memory.max", Bytes: 256 * mi, UsedBytes: 255 * mi}
	high := Limit{Kind: LimitHigh, Group: "/a", File: "memory.high", Bytes: 200 * mi, UsedBytes: 100 * mi}
	parent := Limit{Kind: LimitAncestor, Group: "/p", File: "memory.max", Bytes: 1024 * mi, UsedBytes: 1023 * mi}
	roomy := Host{TotalBytes: 24 << 30, AvailableBytes: 20 << 30}
	for _, c := range []struct {
		name   string
		limits []Limit
		host   Host
		want   LimitKind
		err    error
	}{
		{"its own limit, full", []Limit{own, high}, roomy, LimitOwn, nil},
		{"the parent's, fuller than its own", []Limit{{Kind: LimitOwn, Group: "/a", File: "memory.max", Bytes: 512 * mi, UsedBytes: 300 * mi}, parent}, roomy, LimitAncestor, nil},
		{"the host's: no limit near", []Limit{high}, Host{TotalBytes: 24 << 30, AvailableBytes: 1 << 30}, LimitHost, nil},
		{"nothing binds", []Limit{high}, roomy, "", ErrNoBindingLimit},
	} {
		l, err := Binding(c.limits, c.host)
		if !errors.Is(err, c.err) || l.Kind != c.want {
			t.Errorf("%s: %+v, %v; want %s, %v", c.name, l, err, c.want, c.err)
		}
	}
}

// The shortfall is the demand less the room the limit leaves the group;
// under a shared limit the others' charge is not its room.
func TestShortfall(t *testing.T) {
	own := Limit{Kind: LimitOwn, Bytes: 256 * mi, UsedBytes: 256 * mi}
	s := ShortfallOf(own, Demand{WorkingSetBytes: 640 * mi, ResidentBytes: 256 * mi, SwapBytes: 600 * mi})
	if s.Bytes != 384*mi || s.LowBytes != 576*mi-256*mi || s.HighBytes != 856*mi-256*mi {
		t.Errorf("own limit: %+v, want 384 MiB in [320, 600] MiB: up to all it holds", s)
	}
	// All it holds is the interval's top.
	s = ShortfallOf(own, Demand{WorkingSetBytes: 640 * mi, ResidentBytes: 256 * mi, SwapBytes: 400 * mi})
	if s.HighBytes != 400*mi {
		t.Errorf("bounded by memory and swap: high %d MiB, want 400", s.HighBytes/mi)
	}
	shared := Limit{Kind: LimitAncestor, Bytes: 1024 * mi, UsedBytes: 1024 * mi}
	s = ShortfallOf(shared, Demand{WorkingSetBytes: 500 * mi, ResidentBytes: 300 * mi, SwapBytes: 300 * mi})
	if s.Bytes != 500*mi-300*mi {
		t.Errorf("shared: %d MiB, want 200 (the others hold 724 of 1024)", s.Bytes/mi)
	}
	s = ShortfallOf(own, Demand{WorkingSetBytes: -1, ResidentBytes: 256 * mi, SwapBytes: 100 * mi})
	if s.Bytes != 100*mi || s.LowBytes != 0 || s.HighBytes != 100*mi || !strings.Contains(s.Basis, "no working set") {
		t.Errorf("no working set: %+v", s)
	}
	// A page-cache thrash has no swap: a demand that is a floor reaches
	// all its processes hold, their files' pages out too; one that is a
	// reading does not.
	file := Demand{WorkingSetBytes: 300 * mi, ResidentBytes: 256 * mi, HeldBytes: 520 * mi}
	if s := ShortfallOf(own, file); s.HighBytes != 74*mi {
		t.Errorf("a page-cache thrash measured: high %d MiB, want 74 (a tenth over the point)", s.HighBytes/mi)
	}
	file.Saturated = true
	if s := ShortfallOf(own, file); s.Bytes != 44*mi || s.HighBytes != 264*mi || !strings.Contains(s.Basis, "at least") {
		t.Errorf("a page-cache thrash stalled most of its time: %+v, want 44 MiB, up to 264 MiB, the point a floor", s)
	}
	if s := ShortfallOf(own, Demand{WorkingSetBytes: 100 * mi, ResidentBytes: 100 * mi}); s.Bytes != 0 || s.HighBytes != 0 {
		t.Errorf("a demand that fits: %+v, want none", s)
	}
}

// The culprit is the sibling under the shared limit that grew most, by at
// least culpritShare of the limit; the victim and its own are never it.
func TestCulprit(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	parent := Limit{Kind: LimitAncestor, Group: "/pod", Bytes: 1024 * mi}
	charges := map[string][]Point{
		"/pod/victim":       {{at(0), 600 * mi}, {at(60), 300 * mi}},
		"/pod/victim/child": {{at(0), 0}, {at(60), 500 * mi}},
		"/pod/neighbour":    {{at(0), 400 * mi}, {at(30), 350 * mi}, {at(60), 700 * mi}},
		"/pod/steady":       {{at(0), 20 * mi}, {at(60), 40 * mi}},
		"/other/big":        {{at(0), 0}, {at(60), 900 * mi}},
	}
	c, ok := CulpritOf(parent, "/pod/victim", GrowthOf(charges))
	if !ok || c.Group != "/pod/neighbour" || c.GrewBytes != 350*mi || !c.From.Equal(at(30)) || !c.To.Equal(at(60)) {
		t.Errorf("culprit %+v, %v; want /pod/neighbour, 350 MiB from 30 s to 60 s", c, ok)
	}
	delete(charges, "/pod/neighbour")
	if c, ok := CulpritOf(parent, "/pod/victim", GrowthOf(charges)); ok {
		t.Errorf("steady siblings only: culprit %+v, want none", c)
	}
	if _, ok := CulpritOf(Limit{Kind: LimitOwn, Group: "/pod/victim", Bytes: mi}, "/pod/victim", GrowthOf(charges)); ok {
		t.Error("its own limit is shared with no one, yet a culprit was named")
	}
	host := Limit{Kind: LimitHost, Bytes: 4096 * mi}
	if c, ok := CulpritOf(host, "/pod/victim", GrowthOf(charges)); !ok || c.Group != "/other/big" {
		t.Errorf("the host's: %+v, %v; want /other/big", c, ok)
	}
}

func TestKind(t *testing.T) {
	for _, c := range []struct {
		e    Evidence
		want Kind
	}{
		{Evidence{AnonFaultsPerSecond: 500, DeviceBusyPercent: 20, PoolFullPercent: -1}, KindAnon},
		{Evidence{AnonFaultsPerSecond: 10, ShmemFaultsPerSecond: 400, DeviceBusyPercent: -1, PoolFullPercent: -1}, KindShmem},
		{Evidence{AnonFaultsPerSecond: 5, FileFaultsPerSecond: 800, DeviceBusyPercent: 99, PoolFullPercent: -1}, KindFile},
		// A busy disk leaves the kind to the pages: every heavy thrash
		// keeps its swap disk busy.
		{Evidence{AnonFaultsPerSecond: 300, DeviceBusyPercent: 97, PoolFullPercent: -1}, KindAnon},
		{Evidence{AnonFaultsPerSecond: 300, DeviceBusyPercent: -1, PoolFullPercent: 100}, KindCompressedPool},
	} {
		if got := KindOf(c.e); got != c.want {
			t.Errorf("%+v: %s, want %s", c.e, got, c.want)
		}
	}
}

// The remedies: the limit raised to hold the working set; the culprit
// first when what it took covers the shortfall; waiting first when the
// demand is falling; compressed swap and a faster device only where they
// would help, and said useless where not.
func TestRemedies(t *testing.T) {
	own := Limit{Kind: LimitOwn, Group: "/a", File: "memory.max", Bytes: 256 * mi, UsedBytes: 256 * mi}
	s := Shortfall{Bytes: 384 * mi, LowBytes: 320 * mi, HighBytes: 448 * mi}
	idle := Evidence{DeviceBusyPercent: 30, PoolFullPercent: -1}
	rs, no := Remedies(own, s, Context{Kind: KindAnon, Evidence: idle, CompressRatio: 1.1})
	if len(rs) != 1 || rs[0].Action != ActionRaiseLimit || rs[0].Bytes != 726*mi || rs[0].Target != "/a" || rs[0].Confidence != High {
		t.Errorf("own limit: %+v, want raise /a to 726 MiB (704 MiB and the reclaim margin), high", rs)
	}
	if len(no) != 2 || no[0].Action != ActionCompressedSwap || no[1].Action != ActionFasterDevice {
		t.Errorf("useless: %+v, want compressed swap (1.1:1) and a faster device (30 %% busy)", no)
	}

	shared := Limit{Kind: LimitAncestor, Group: "/pod", File: "memory.max", Bytes: 1024 * mi, UsedBytes: 1024 * mi}
	big := &Culprit{Group: "/pod/n", GrewBytes: 500 * mi, From: time.Unix(0, 0), To: time.Unix(60, 0)}
	rs, _ = Remedies(shared, s, Context{Kind: KindAnon, Evidence: idle, Culprit: big})
	if len(rs) != 2 || rs[0].Action != ActionLimitCulprit || rs[0].Confidence != High {
		t.Errorf("a culprit that took more than the shortfall: %+v, want it first", rs)
	}
	small := &Culprit{Group: "/pod/n", GrewBytes: 100 * mi}
	rs, _ = Remedies(shared, s, Context{Kind: KindAnon, Evidence: idle, Culprit: small})
	if len(rs) != 2 || rs[0].Action != ActionRaiseLimit || rs[0].Target != "/pod" {
		t.Errorf("a culprit that took less than the shortfall: %+v, want the parent's limit raised first", rs)
	}
	// Under the point, over the interval's low end: within what the
	// estimate can tell apart.
	within := &Culprit{Group: "/pod/n", GrewBytes: 350 * mi}
	rs, _ = Remedies(shared, s, Context{Kind: KindAnon, Evidence: idle, Culprit: within})
	if len(rs) != 2 || rs[0].Action != ActionLimitCulprit || rs[0].Confidence != Medium {
		t.Errorf("a culprit that took the shortfall's low end, not its point: %+v, want it first, medium", rs)
	}

	rs, _ = Remedies(own, s, Context{Kind: KindAnon, Evidence: idle, Trend: Trend{FellBytes: 300 * mi, Over: 10 * time.Second}})
	if rs[0].Action != ActionWait {
		t.Errorf("demand falling: %+v, want waiting first", rs)
	}
	fell := Trend{FellBytes: 50 * mi, Over: 5 * time.Second}
	if rs, _ := Remedies(own, Shortfall{}, Context{Kind: KindAnon, Evidence: idle, Trend: fell}); len(rs) != 1 || rs[0].Action != ActionWait {
		t.Errorf("a working set that fits again after what it holds fell: %+v, want only waiting", rs)
	}
	// The point reads 0 (a demand read low), all it holds is 150 MiB
	// over: a dip of 10 MiB in what it holds is no falling demand.
	low := Shortfall{Bytes: 0, LowBytes: 0, HighBytes: 150 * mi}
	rs, _ = Remedies(own, low, Context{Kind: KindAnon, Evidence: idle, Trend: Trend{FellBytes: 10 * mi, Over: 3 * time.Second}})
	if rs[0].Action == ActionWait {
		t.Errorf("a 10 MiB dip against a shortfall of up to 150 MiB whose point read 0: %+v, want no waiting first", rs)
	}
	// A page-cache thrash's charge dips at its limit as the kernel
	// reclaims: a dip within the reclaim margin is no falling demand.
	churn := Trend{FellBytes: int64(0.02 * float64(own.Bytes)), Over: time.Second}
	rs, _ = Remedies(own, Shortfall{}, Context{Kind: KindFile, Evidence: idle, Trend: churn})
	if len(rs) == 0 || rs[0].Action == ActionWait {
		t.Errorf("a dip of 2 %% of the limit, all it holds fitting: %+v, want no waiting first", rs)
	}
	// Everything it holds fits, and nothing fell: it thrashes in the
	// margin the kernel reclaims in, and waiting would not end it.
	rs, _ = Remedies(own, Shortfall{}, Context{Kind: KindAnon, Evidence: idle})
	if len(rs) == 0 || rs[0].Action != ActionRaiseLimit || rs[0].Bytes <= own.Bytes || rs[0].Confidence != Medium {
		t.Errorf("all it holds only just fits, not falling: %+v, want the limit raised by the reclaim margin first", rs)
	}
	rs, no = Remedies(own, s, Context{Kind: KindDevice, Evidence: Evidence{DeviceBusyPercent: 98, PoolFullPercent: -1}, CompressRatio: 3})
	if len(rs) != 3 || rs[1].Action != ActionCompressedSwap || rs[2].Action != ActionFasterDevice || len(no) != 0 {
		t.Errorf("device-bound, compressible: %+v, %+v", rs, no)
	}
	rs, _ = Remedies(Limit{Kind: LimitHost, Bytes: 24 << 30, UsedBytes: 24 << 30}, s, Context{Kind: KindAnon, Evidence: idle})
	if rs[0].Action != ActionAddMemory {
		t.Errorf("the host's: %+v", rs)
	}
	// A group that may not swap: compressed swap is no remedy, however
	// well its pages compress.
	rs, no = Remedies(own, s, Context{Kind: KindAnon, Evidence: idle, CompressRatio: 3, NoSwap: true})
	if len(rs) != 1 || rs[0].Action != ActionRaiseLimit || len(no) == 0 || no[0].Action != ActionCompressedSwap || !strings.Contains(no[0].Why, "memory.swap.max is 0") {
		t.Errorf("no swap allowed: %+v, %+v; want compressed swap ruled out for memory.swap.max", rs, no)
	}
}

// A memory.swap.max of 0 on the group or an ancestor beneath the mount
// forbids swap (Kubernetes' LimitedSwap on a Guaranteed or BestEffort
// pod's containers); the mount's own file and a missing one say nothing.
func TestNoSwap(t *testing.T) {
	root := t.TempDir()
	writeGroup(t, root, "kubepods/besteffort/podx/c1", map[string]string{"memory.swap.max": "max"})
	writeGroup(t, root, "kubepods/besteffort/podx", map[string]string{"memory.swap.max": "0"})
	writeGroup(t, root, "kubepods/burstable/pody/c2", map[string]string{"memory.swap.max": "104857600"})
	writeGroup(t, root, "system.slice/a.service", nil)
	if err := os.WriteFile(filepath.Join(root, "memory.swap.max"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{
		"kubepods/besteffort/podx/c1": true, "kubepods/besteffort/podx": true,
		"kubepods/burstable/pody/c2": false, "system.slice/a.service": false,
	} {
		if got := noSwap(dirReader{}, root, filepath.Join(root, dir)); got != want {
			t.Errorf("noSwap(%s) = %v, want %v", dir, got, want)
		}
	}
	if noSwap(dirReader{}, "", filepath.Join(root, "kubepods/besteffort/podx")) {
		t.Error("noSwap without a cgroup2 mount: want false")
	}
}

// A diagnosis opens when its group reaches thrashing, follows it each
// sample, and closes with what ended it.
func TestTrackerLife(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	base := Sample{
		Group: "/app", Labels: map[string]string{"unit": "app.service"}, Thrashing: true,
		Limits:   []Limit{{Kind: LimitOwn, Group: "/app", File: "memory.max", Bytes: 256 * mi, UsedBytes: 256 * mi}},
		Host:     Host{TotalBytes: 24 << 30, AvailableBytes: 20 << 30},
		Demand:   Demand{WorkingSetBytes: 640 * mi, ResidentBytes: 256 * mi, SwapBytes: 500 * mi},
		Evidence: Evidence{AnonFaultsPerSecond: 900, DeviceBusyPercent: 40, PoolFullPercent: -1}, Processes: 4,
	}
	calm := base
	calm.Thrashing = false

	tr := NewTracker()
	if c := tr.Update(at(0), []Sample{calm}); len(c) != 0 || len(tr.Open()) != 0 {
		t.Fatal("opened with nothing thrashing")
	}
	tr.Update(at(1), []Sample{base})
	open := tr.Open()
	if len(open) != 1 || open[0].Binding == nil || open[0].Binding.Kind != LimitOwn || open[0].Shortfall.Bytes != 384*mi {
		t.Fatalf("open: %+v", open)
	}
	if s := open[0].Summary; !strings.Contains(s, "app.service anon-swap-in thrash") || !strings.Contains(s, "needs ~384 MiB more than its limit of 256 MiB") || !strings.Contains(s, "raise-limit to 780 MiB") {
		t.Errorf("summary %q", s)
	}

	// A demand that is a floor is said as the interval it leaves.
	floor := base
	floor.Group, floor.Demand = "/cache", Demand{WorkingSetBytes: 300 * mi, ResidentBytes: 256 * mi, HeldBytes: 520 * mi, Saturated: true}
	other := NewTracker()
	other.Update(at(1), []Sample{floor})
	if o := other.Open(); len(o) != 1 || !strings.Contains(o[0].Summary, "needs 44 MiB to 264 MiB more than its limit") {
		t.Errorf("a demand that is a floor: %+v", o)
	}

	// Its charge falls back from the limit while it still thrashes: the
	// limit that bound it still does.
	eased := base
	eased.Limits = []Limit{{Kind: LimitOwn, Group: "/app", File: "memory.max", Bytes: 256 * mi, UsedBytes: 200 * mi}}
	tr.Update(at(1), []Sample{eased})
	if open := tr.Open(); len(open) != 1 || open[0].Binding == nil || open[0].Binding.UsedBytes != 200*mi {
		t.Fatalf("the charge fell back from the limit: %+v, want the limit still binding", open)
	}

	raised := calm
	raised.Limits = []Limit{{Kind: LimitOwn, Group: "/app", File: "memory.max", Bytes: 704 * mi, UsedBytes: 640 * mi}}
	closed := tr.Update(at(2), []Sample{raised})
	if len(closed) != 1 || closed[0].Closed == nil || !closed[0].Closed.Equal(at(2)) || !strings.Contains(closed[0].Ended, "changed from 256 MiB to 704 MiB") {
		t.Fatalf("closed %+v", closed)
	}
	if len(tr.Open()) != 0 {
		t.Error("still open after it closed")
	}

	for _, c := range []struct {
		name string
		next *Sample
		want string
	}{
		{"gone", nil, "its group is gone"},
		{"a process exited", &Sample{Group: "/app", Limits: base.Limits, Processes: 3, Demand: base.Demand}, "1 of its 4 processes"},
		{"OOM", &Sample{Group: "/app", Limits: base.Limits, Processes: 3, OOMKills: 1}, "OOM killer killed 1"},
		{"demand fell", &Sample{Group: "/app", Limits: base.Limits, Processes: 4, Demand: Demand{WorkingSetBytes: 200 * mi}}, "demand fell from 640 MiB to 200 MiB"},
	} {
		tr.Update(at(10), []Sample{base})
		var next []Sample
		if c.next != nil {
			next = []Sample{*c.next}
		}
		closed := tr.Update(at(11), next)
		if len(closed) != 1 || !strings.Contains(closed[0].Ended, c.want) {
			t.Errorf("%s: closed %+v, want ended by %q", c.name, closed, c.want)
		}
	}

	// A burst: a process leaves while the group still thrashes a sample,
	// its demand with it; then it calms.
	tr.Update(at(20), []Sample{base})
	left := base
	left.Processes, left.Demand.WorkingSetBytes = 2, 200*mi
	tr.Update(at(21), []Sample{left})
	after := left
	after.Thrashing = false
	if closed := tr.Update(at(22), []Sample{after}); len(closed) != 1 || !strings.Contains(closed[0].Ended, "2 of its 4 processes exited") {
		t.Errorf("a burst: closed %+v, want ended by the processes that left while it still thrashed", closed)
	}
}

// The history keeps the last HistoryLen, survives a reopen, and refuses a
// file that is not its own.
func TestHistory(t *testing.T) {
	dir := t.TempDir()
	h, err := OpenHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range HistoryLen + 5 {
		now := time.Unix(int64(i), 0).UTC()
		if err := h.Add(Diagnosis{ID: string(rune('a' + i%26)), Group: "/g", Opened: now, Closed: &now, Ended: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	h2, err := OpenHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	l := h2.List()
	if len(l) != HistoryLen || l[0].Opened.Unix() != 5 || l[len(l)-1].Opened.Unix() != HistoryLen+4 {
		t.Errorf("reopened: %d kept, first %v, last %v; want the last %d", len(l), l[0].Opened, l[len(l)-1].Opened, HistoryLen)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("%d files in the dir, want the history alone", len(ents))
	}

	for range 2 * HistoryLen {
		if err := h2.Add(Diagnosis{ID: "more", Group: "/g"}); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, HistoryFile)); bytes.Count(b, []byte("\n")) > 2*HistoryLen {
		t.Errorf("%d more closed: the file holds %d lines, want at most %d", 2*HistoryLen, bytes.Count(b, []byte("\n")), 2*HistoryLen)
	}

	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, HistoryFile), []byte(`{"id":"x","rogue":1}`+"\n"), 0o600)
	if _, err := OpenHistory(bad); err == nil || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("a history with an unknown field: %v, want an error saying to remove it", err)
	}
	linked := t.TempDir()
	os.Symlink(filepath.Join(dir, HistoryFile), filepath.Join(linked, HistoryFile))
	if _, err := OpenHistory(linked); err == nil {
		t.Error("a history through a link was read")
	}
	fifo := t.TempDir()
	if err := mkfifo(filepath.Join(fifo, HistoryFile)); err == nil {
		if _, err := OpenHistory(fifo); err == nil || !strings.Contains(err.Error(), "regular file") {
			t.Errorf("a FIFO: %v, want refused without blocking", err)
		}
	}
}

// A last line cut short (the host down mid-append) is dropped and the
// file rewritten without it; the history first kept as one JSON array is
// read once, rewritten as lines and removed.
func TestHistoryTornAndOld(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(100, 0).UTC()
	whole, _ := json.Marshal(Diagnosis{ID: "whole", Group: "/g", Opened: now, Closed: &now})
	os.WriteFile(filepath.Join(dir, HistoryFile), append(append(whole, '\n'), `{"id":"cut","gr`...), 0o600)
	h, err := OpenHistory(dir)
	if err != nil {
		t.Fatal(err)
	}
	if l := h.List(); len(l) != 1 || l[0].ID != "whole" {
		t.Errorf("a torn last line: kept %+v, want the whole one alone", l)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, HistoryFile)); !bytes.Equal(b, append(whole, '\n')) {
		t.Errorf("after the torn line: the file holds %q, want the whole line alone", b)
	}

	old := t.TempDir()
	arr, _ := json.Marshal([]Diagnosis{{ID: "a", Group: "/g"}, {ID: "b", Group: "/g"}})
	os.WriteFile(filepath.Join(old, oldHistoryFile), arr, 0o600)
	h, err = OpenHistory(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Add(Diagnosis{ID: "c", Group: "/g"}); err != nil {
		t.Fatal(err)
	}
	h, err = OpenHistory(old)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range h.List() {
		ids = append(ids, d.ID)
	}
	if ents, _ := os.ReadDir(old); len(ents) != 1 || ents[0].Name() != HistoryFile || strings.Join(ids, ",") != "a,b,c" {
		t.Errorf("the old array's history: files %v, diagnoses %v; want %s alone holding a,b,c", ents, ids, HistoryFile)
	}
}

// A pod is named with its QoS class where its cgroup path shows one: under
// Kubernetes' LimitedSwap only Burstable pods may swap.
func TestNameSaysTheQoSClass(t *testing.T) {
	for _, c := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"pod_uid": "7f3a", "qos": "besteffort"}, "besteffort pod 7f3a"},
		{map[string]string{"pod_uid": "7f3a"}, "pod 7f3a"},
		{map[string]string{"unit": "db.service"}, "db.service"},
	} {
		if got := name(&Diagnosis{Group: "/g", Labels: c.labels}); got != c.want {
			t.Errorf("name(%v) = %q, want %q", c.labels, got, c.want)
		}
	}
}

// Waiting ranks first only when what the group holds in memory and swap
// falls: a working-set estimate that moves under a heavy thrash, with
// nothing freed, is no sign the thrash is ending.
func TestWaitFollowsWhatTheGroupHolds(t *testing.T) {
	t0 := time.Unix(10_000, 0)
	base := Sample{
		Group: "/run", Thrashing: true,
		Limits:   []Limit{{Kind: LimitOwn, Group: "/run", File: "memory.max", Bytes: 200 * mi, UsedBytes: 200 * mi}},
		Host:     Host{TotalBytes: 24 << 30, AvailableBytes: 20 << 30},
		Demand:   Demand{WorkingSetBytes: 380 * mi, ResidentBytes: 200 * mi, SwapBytes: 210 * mi},
		Evidence: Evidence{AnonFaultsPerSecond: 2800, DeviceBusyPercent: -1, PoolFullPercent: -1}, Processes: 2,
	}
	tr := NewTracker()
	tr.Update(t0, []Sample{base})
	noisy := base
	noisy.Demand.WorkingSetBytes = 240 * mi // the estimate dips; nothing was freed
	tr.Update(t0.Add(3*time.Second), []Sample{noisy})
	if r := tr.Open()[0].Remedies; r[0].Action != ActionRaiseLimit {
		t.Errorf("the working set's estimate dipped, nothing freed: remedies %+v, want the limit raised first", r)
	}
	freed := noisy
	freed.Demand = Demand{WorkingSetBytes: 240 * mi, ResidentBytes: 200 * mi, SwapBytes: 10 * mi} // a process exited
	tr.Update(t0.Add(6*time.Second), []Sample{freed})
	if r := tr.Open()[0].Remedies; r[0].Action != ActionWait {
		t.Errorf("200 MiB freed in 6 s against a 40 MiB shortfall: remedies %+v, want waiting first", r)
	}
}

// A busy swap disk: under a binding limit the thrash keeps its kind and a
// faster disk comes last, at low confidence; with no limit binding and
// memory to spare, the disk is what holds it back (device-bound).
func TestSwapDiskAtItsCeiling(t *testing.T) {
	own := Limit{Kind: LimitOwn, Group: "/a", File: "memory.max", Bytes: 256 * mi, UsedBytes: 256 * mi}
	s := Shortfall{Bytes: 384 * mi, LowBytes: 320 * mi, HighBytes: 448 * mi}
	busy := Evidence{AnonFaultsPerSecond: 15000, DeviceBusyPercent: 97, Device: "vda", PoolFullPercent: -1}
	rs, no := Remedies(own, s, Context{Kind: KindOf(busy), Evidence: busy})
	if len(rs) != 2 || rs[0].Action != ActionRaiseLimit || rs[1].Action != ActionFasterDevice || rs[1].Confidence != Low || len(no) != 0 {
		t.Errorf("a binding limit, the disk 97 %% busy: %+v, %+v; want raise-limit, then a faster device at low confidence", rs, no)
	} else if !strings.Contains(rs[1].Effect, "vda is 97 % busy") {
		t.Errorf("the faster device's effect does not name the disk: %q", rs[1].Effect)
	}
	calm := busy
	calm.DeviceBusyPercent = 40
	if _, no := Remedies(own, s, Context{Kind: KindOf(calm), Evidence: calm}); len(no) != 1 || no[0].Action != ActionFasterDevice {
		t.Errorf("the disk 40 %% busy: a faster device not ruled out: %+v", no)
	}
	// The group's own I/O limit spent (a run on hdd-2013): its device is
	// as slow as the limit, however idle the disk.
	throttled := calm
	throttled.DeviceBusyPercent, throttled.IOLimitPercent, throttled.IOLimit = 3, 98, "253:0 riops=120"
	if rs, no := Remedies(own, s, Context{Kind: KindOf(throttled), Evidence: throttled}); len(rs) != 2 || rs[1].Action != ActionFasterDevice || len(no) != 0 {
		t.Errorf("its I/O limit 98 %% used: %+v, %+v; want a faster device advised", rs, no)
	} else if !strings.Contains(rs[1].Effect, "its own I/O limit (253:0 riops=120) is 98 % used") {
		t.Errorf("the faster device's effect does not name the limit: %q", rs[1].Effect)
	}

	free := []Limit{{Kind: LimitOwn, Group: "/a", File: "memory.max", Bytes: 4 << 30, UsedBytes: 300 * mi}}
	host := Host{TotalBytes: 24 << 30, AvailableBytes: 20 << 30}
	for _, c := range []struct {
		e        Evidence
		kind     Kind
		remedies int
	}{{busy, KindDevice, 1}, {calm, KindAnon, 0}} {
		tr := NewTracker()
		tr.Update(time.Unix(1000, 0), []Sample{{Group: "/a", Thrashing: true, Limits: free, Host: host, Evidence: c.e}})
		open := tr.Open()
		if len(open) != 1 || open[0].Kind != c.kind || len(open[0].Remedies) != c.remedies || open[0].Binding != nil {
			t.Errorf("no limit binding, the disk %.0f %% busy: %+v; want %s with %d remedies", c.e.DeviceBusyPercent, open, c.kind, c.remedies)
		}
	}
}

// under takes cleaned paths as they are and cleans the rest.
func TestUnderAndRelated(t *testing.T) {
	for _, c := range []struct {
		g, parent string
		want      bool
	}{
		{"/a/b", "/a", true}, {"/ab", "/a", false}, {"/a", "/a", false}, {"/a/b", "/", true}, {"/", "/", false},
		{"a/b/", "/a", true}, {"/a//b", "/a/", true}, {"/a/../b", "/a", false}, {"/a", "/a/b", false},
	} {
		if got := under(c.g, c.parent); got != c.want {
			t.Errorf("under(%q, %q) = %v, want %v", c.g, c.parent, got, c.want)
		}
	}
	// The culprit is never the victim, a group it holds or one holding it,
	// however their paths are written.
	t0 := time.Unix(0, 0)
	grew := func(b int64) []Point { return []Point{{At: t0, Bytes: 0}, {At: t0.Add(time.Minute), Bytes: b}} }
	growth := GrowthOf(map[string][]Point{"/p/a/b/": grew(900), "p/a": grew(800), "/p": grew(700), "/p/c": grew(100)})
	if c, ok := CulpritOf(Limit{Kind: LimitAncestor, Group: "p/", Bytes: 1000}, "/p//a/", growth); !ok || c.Group != "/p/c" {
		t.Errorf("culprit %+v (%v), want /p/c: the victim /p/a's own and its descendant's growth are not a neighbour's", c, ok)
	}
}
