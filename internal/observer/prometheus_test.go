package observer

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/dashboards"
	"github.com/thrashscope/thrashscope/internal/cgroup"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// deployDir is deploy/prometheus, absolute, so a temporary Prometheus config
// can point at the shipped rules.
func deployDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "deploy", "prometheus"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPrometheusRules runs promtool over deploy/prometheus: every rules file
// and the example config are valid, and the rule unit tests pass.
func TestPrometheusRules(t *testing.T) {
	promtool := testenv.RequireTool(t, "promtool", "prometheus")
	dir := deployDir(t)
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	rules, _ := filepath.Glob(filepath.Join(dir, "rules", "*.yml"))
	rules = slices.DeleteFunc(rules, func(p string) bool { return strings.HasSuffix(p, "_test.yml") })
	if len(rules) < 2 {
		t.Fatalf("rules files in %s: %v", dir, rules)
	}
	for _, f := range rules {
		run("check", "rules", f)
	}
	run("check", "config", "prometheus.yml")
	run("test", "rules", filepath.Join("rules", "thrashscope_test.yml"))

	// Every alert has a unit test.
	tests, err := os.ReadFile(filepath.Join(dir, "rules", "thrashscope_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rules {
		b, _ := os.ReadFile(f)
		for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(string(b), -1) {
			if !strings.Contains(string(tests), "alertname: "+m[1]+"\n") {
				t.Errorf("alert %s (%s) has no test in thrashscope_test.yml", m[1], filepath.Base(f))
			}
		}
	}
}

// promServer is a real Prometheus scraping one observer.
type promServer struct {
	url    string
	cmd    *exec.Cmd
	config string // its config file's path
	target string
}

// lateRunStates is a scrape's metric_relabel_configs that drops the run
// cgroups' thrashing state: with it, a run's workload reaches Prometheus
// only once the config is loaded without it (reloadAll), so that its
// first sample there is whatever state it is in then.
const lateRunStates = `    metric_relabel_configs:
      - source_labels: [__name__, cgroup]
        regex: 'thrashscope_cgroup_thrashing_state;.*/thrashscope-run-[^/]*'
        action: drop
`

// writeConfig writes the test's Prometheus config: the shipped thrashscope
// rules, target scraped every second, extra appended to its scrape job.
func (p *promServer) writeConfig(t *testing.T, extra string) {
	t.Helper()
	// evaluation_interval does not apply to the shipped groups: they set
	// their own (5s), and that is what is under test.
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: thrashscope
    static_configs:
      - targets: [%q]
%s`, filepath.Join(deployDir(t), "rules", "thrashscope.yml"), p.target, extra)
	tmp := p.config + ".new"
	if err := os.WriteFile(tmp, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p.config); err != nil {
		t.Fatal(err)
	}
}

// reloadAll has Prometheus load its config without extra (SIGHUP), and
// waits until it says it has.
func (p *promServer) reloadAll(t *testing.T) {
	t.Helper()
	p.writeConfig(t, "")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "prometheus to load its config without the relabelling", func() bool {
		time.Sleep(100 * time.Millisecond)
		var data struct {
			YAML string `json:"yaml"`
		}
		p.api(t, "/api/v1/status/config", &data)
		return !strings.Contains(data.YAML, "metric_relabel_configs")
	})
}

// startPrometheus runs prometheus on a free loopback port with the shipped
// thrashscope rules, scraping target every second, extra appended to its
// scrape job.
func startPrometheus(t *testing.T, bin, target, extra string) *promServer {
	t.Helper()
	dir := t.TempDir()
	p := &promServer{config: filepath.Join(dir, "prometheus.yml"), target: target}
	p.writeConfig(t, extra)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+p.config,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.url, p.cmd = "http://"+addr, cmd
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	waitFor(t, 30*time.Second, "prometheus to be ready", func() bool {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// api GETs a Prometheus HTTP API path and decodes its data field.
func (p *promServer) api(t *testing.T, path string, data any) {
	t.Helper()
	resp, err := http.Get(p.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		t.Fatalf("GET %s: %d %v %s", path, resp.StatusCode, err, body.Error)
	}
	if err := json.Unmarshal(body.Data, data); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query runs an instant query and returns the vector.
func (p *promServer) query(t *testing.T, q string) []promSample {
	t.Helper()
	var data struct {
		Result []promSample `json:"result"`
	}
	p.api(t, "/api/v1/query?query="+url.QueryEscape(q), &data)
	return data.Result
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
	Value  string            `json:"value"`
}

func (p *promServer) alerts(t *testing.T) []promAlert {
	t.Helper()
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	p.api(t, "/api/v1/alerts", &data)
	return data.Alerts
}

// alertWatch follows one alert: when it first went pending and firing, and
// when it last stopped firing.
type alertWatch struct {
	pending, fired, lastFiring, resolved time.Time
	instances                            map[string]bool // firing instances, by comm/pid or instance
}

func (w *alertWatch) firing() bool { return !w.fired.IsZero() && w.resolved.IsZero() }

// TestAlertsFireOnARealThrash runs e4 at a tenth under the real observer,
// scraped by a real Prometheus with the shipped rules: the host, process
// and workload alerts fire during the thrash and resolve after it, the
// workload's naming the run's cgroup. The run is one workload, as a pod
// is: its consumers' groups fold into it (--cgroup.depth at the run
// cgroup's level, beneath the observer's own group). A consumer alone,
// one of 25 taking turns at the limit, is stalled (PSI full) about a
// twentieth of the time, under --detector.psi-full's 10 %; the run as a
// whole is not. The same run checks
// the Grafana dashboards: every metric they name is in a scrape, and every
// query they run returns data (dashboards_test.go).
func TestAlertsFireOnARealThrash(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	bin := testenv.RequireTool(t, "prometheus", "prometheus")
	own, err := cgroup.OwnUnified("/proc")
	if err != nil {
		t.Fatalf("no cgroup2 group of this process: %v", err)
	}
	runDepth := strings.Count(strings.Trim(filepath.Join(unifiedRel(t, own.Path), "run"), "/"), "/") + 1
	d := startDaemon(t, t.TempDir(), "--probes=bpf", fmt.Sprintf("--cgroup.depth=%d", runDepth))
	// The run's workload reaches Prometheus once the observer already says
	// it thrashes, as one does that enters the top-K thrashing: the
	// Workloads dashboard's annotation must mark that onset too.
	p := startPrometheus(t, bin, strings.TrimPrefix(d.url, "http://"), lateRunStates)
	// Scraped, and the shipped recording rules evaluated on it.
	waitFor(t, 30*time.Second, "a scrape and a recorded rate", func() bool {
		time.Sleep(500 * time.Millisecond)
		return len(p.query(t, `up{job="thrashscope"} == 1`)) == 1 && len(p.query(t, `thrashscope:swap_in_pages:rate10s`)) == 1
	})

	watched := []string{"ThrashscopeHostThrashing", "ThrashscopeProcessMajorFaults", "ThrashscopeWorkingSetOvercommit", "ThrashscopeWorkloadThrashing"}
	w := map[string]*alertWatch{}
	for _, name := range watched {
		w[name] = &alertWatch{instances: map[string]bool{}}
	}
	others := map[string]string{} // other alerts seen, with their state

	// The dashboards' metrics are looked for in scrapes during the run,
	// when the run_* and per-process series exist.
	metrics := newDashboardMetrics(t)
	// Under tpf, so the policy's series and its annotation have actions
	// to show: it protects one consumer at a time and the thrash goes on.
	rec := d.startRun(t, `{"preset":"e4","scale":0.1,"policy":"tpf"}`)
	start := rec.StartedAt
	runGroup := "/" + cgroup.Prefix + "run-" + rec.ID
	diag := &diagnosisWatch{runGroup: runGroup}
	var end, exposed time.Time
	for {
		now := time.Now()
		if end.IsZero() {
			diag.look(t, d, now)
		}
		if end.IsZero() {
			metrics.scrape(t, d.url)
		}
		if exposed.IsZero() {
			if _, body := get(t, d.url+"/metrics"); thrashingIn(body, runGroup) {
				p.reloadAll(t)
				exposed = time.Now()
				t.Logf("the run's workload exposed to Prometheus at %s, thrashing", exposed.Sub(start).Round(100*time.Millisecond))
			}
		}
		firingNow := map[string]bool{}
		for _, a := range p.alerts(t) {
			name := a.Labels["alertname"]
			aw, ok := w[name]
			if !ok {
				others[name] = a.State
				continue
			}
			if aw.pending.IsZero() {
				aw.pending = now
			}
			if a.State == "firing" {
				firingNow[name] = true
				id := a.Labels["instance"]
				if a.Labels["pid"] != "" {
					id = a.Labels["comm"] + "/" + a.Labels["pid"]
				}
				if a.Labels["cgroup"] != "" {
					id = a.Labels["cgroup"]
				}
				aw.instances[id] = true
			}
		}
		for _, name := range watched {
			aw := w[name]
			switch {
			case firingNow[name] && aw.fired.IsZero():
				aw.fired = now
			case firingNow[name]:
				aw.resolved = time.Time{} // fired again
			case aw.firing():
				aw.resolved = now
			}
			if firingNow[name] {
				aw.lastFiring = now
			}
		}
		if end.IsZero() {
			if r := d.record(t, rec.ID); !run.Active(r.State) {
				if r.State != run.StateCompleted || r.EndedAt == nil {
					t.Fatalf("run ended %s: %s", r.State, r.Reason)
				}
				end = *r.EndedAt
				// The thrash, in the run cgroup's own PSI.
				if r.Pressure == nil || r.Pressure.SomeSeconds <= 0 {
					t.Errorf("the record's pressure %+v: want the run cgroup's memory.pressure some over the thrash", r.Pressure)
				} else {
					t.Logf("run cgroup: PSI some %.1f s, full %.1f s; memory events %v", r.Pressure.SomeSeconds, r.Pressure.FullSeconds, r.MemoryEvents)
				}
			}
		}
		if !end.IsZero() && !slices.ContainsFunc(watched, func(name string) bool { return w[name].firing() }) {
			break
		}
		// A process's 10s rate empties 10s after its last fault and groups
		// evaluate every 5s; 90 s leaves the detector's hysteresis room too.
		if !end.IsZero() && now.After(end.Add(90*time.Second)) {
			break
		}
		if now.After(start.Add(5 * time.Minute)) {
			t.Fatal("the run did not end within 5 minutes")
		}
		time.Sleep(500 * time.Millisecond)
	}

	at := func(tm time.Time) string {
		if tm.IsZero() {
			return "never"
		}
		return tm.Sub(start).Round(100 * time.Millisecond).String()
	}
	t.Logf("run %s: started at 0s, ended at %s", rec.ID, at(end))
	for _, name := range watched {
		aw := w[name]
		ids := make([]string, 0, len(aw.instances))
		for id := range aw.instances {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		t.Logf("%s: pending %s, firing %s, last firing %s, resolved %s; %d firing instances %v",
			name, at(aw.pending), at(aw.fired), at(aw.lastFiring), at(aw.resolved), len(ids), ids)
		switch {
		case aw.fired.IsZero():
			t.Errorf("%s never fired during the run", name)
		case aw.fired.After(end):
			t.Errorf("%s fired %s after the run ended", name, aw.fired.Sub(end).Round(time.Millisecond))
		case aw.firing():
			t.Errorf("%s still firing 90 s after the run ended", name)
		}
	}
	consumers := 0
	for id := range w["ThrashscopeProcessMajorFaults"].instances {
		if strings.HasPrefix(id, "consumer-") {
			consumers++
		}
	}
	if consumers == 0 {
		t.Error("ThrashscopeProcessMajorFaults fired for no consumer")
	}
	// The workload alert names the run's cgroup, its consumers folded in.
	named := 0
	for id := range w["ThrashscopeWorkloadThrashing"].instances {
		if strings.HasSuffix(id, runGroup) {
			named++
		}
	}
	if named == 0 {
		t.Errorf("ThrashscopeWorkloadThrashing named no cgroup of the run (%s): %v", runGroup, w["ThrashscopeWorkloadThrashing"].instances)
	}
	if others["ThrashscopeProbeDown"] != "" {
		t.Errorf("ThrashscopeProbeDown went %s with every probe attached", others["ThrashscopeProbeDown"])
	}
	checkDemandPlateau(t, p, start, end)
	diag.check(t, start)
	t.Logf("other alerts seen: %v", others)

	// Every dashboard query over the run, from just before it started (the
	// run-start annotation looks 5 s back) to past its end. The run-end
	// annotation looks 5 s back for the change, so with a 2 s step some
	// evaluation must land within 4 s after the scrape that saw it: the
	// last scrape must be 5 s past the end (7 s, in whole seconds and for
	// the scrape that saw the end). The alerts can resolve before that.
	waitFor(t, 30*time.Second, "scrapes 7 s past the run's end", func() bool {
		return len(p.query(t, fmt.Sprintf(`timestamp(up{job="thrashscope"}) > %d`, end.Add(7*time.Second).Unix()))) == 1
	})
	metrics.check(t)
	checkDashboardQueries(t, p, strings.TrimPrefix(d.url, "http://"), start.Add(-10*time.Second), time.Now())
	checkLateOnsetMarked(t, p, strings.TrimPrefix(d.url, "http://"), runGroup, start.Add(-10*time.Second), time.Now())

	// What the rules saw, for the log (and the reason when an alert failed).
	for _, q := range []string{
		`max_over_time(thrashscope_thrashing_state[10m])`,
		`max_over_time(thrashscope_high_fault_processes[10m])`,
		`max_over_time(thrashscope_working_set_ratio[10m])`,
		`max_over_time(max(sum without (kind) (thrashscope:process_major_faults:rate10s{comm=~"consumer-.*"}))[10m:5s])`,
		`max_over_time(thrashscope:pressure_memory_stalled_seconds:rate10s{kind="full"}[10m])`,
		`max_over_time(max(thrashscope_cgroup_thrashing_state)[10m:5s])`,
		`max_over_time(max(thrashscope:cgroup_pressure_memory_stalled_seconds:rate10s{kind="full"})[10m:5s])`,
	} {
		if res := p.query(t, q); len(res) == 0 {
			t.Logf("%s: no data", q)
		} else {
			t.Logf("%s = %v", q, res[0].Value[1])
		}
	}
}

// thrashingIn says whether a scrape has the workload whose cgroup ends in
// suffix in the thrashing state.
func thrashingIn(scrape, suffix string) bool {
	for line := range strings.Lines(scrape) {
		rest, ok := strings.CutPrefix(line, "thrashscope_cgroup_thrashing_state{")
		if ok && strings.Contains(rest, suffix+`"`) && strings.HasSuffix(strings.TrimSpace(rest), "} 2") {
			return true
		}
	}
	return false
}

// checkLateOnsetMarked: the run's workload's first sample in Prometheus
// says thrashing (the shape under test; without it the check proves
// nothing), and the Workloads dashboard's "Workloads thrashing" annotation
// marks it all the same.
func checkLateOnsetMarked(t *testing.T, p *promServer, instance, runGroup string, from, to time.Time) {
	t.Helper()
	sel := fmt.Sprintf(`thrashscope_cgroup_thrashing_state{cgroup=~".*%s"}`, regexp.QuoteMeta(runGroup))
	res, err := p.queryRange(sel, from, to, time.Second)
	if err != nil || len(res) != 1 || len(res[0].Values) == 0 {
		t.Fatalf("%s over the run: %v, %v: want one series", sel, res, err)
	}
	if first := fmt.Sprint(res[0].Values[0][1]); first != "2" {
		t.Fatalf("the run's workload's first sample in Prometheus is %s, not 2 (thrashing): the late exposure did not happen, the annotation check proves nothing", first)
	}
	var ann *dashboards.Query
	var file dashboards.File
	for _, f := range shippedDashboards(t) {
		qs, err := f.Dashboard.Queries()
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Kind == dashboards.KindAnnotation && q.Title == "Workloads thrashing" {
				ann, file = &q, f
			}
		}
	}
	if ann == nil {
		t.Fatal("no \"Workloads thrashing\" annotation in the shipped dashboards")
	}
	expr, err := file.Dashboard.Expand(ann.Expr, dashboardVars(instance, to.Sub(from)))
	if err != nil {
		t.Fatal(err)
	}
	marks, err := p.queryRange(expr, from, to, dashboardStep)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range marks {
		if strings.HasSuffix(m.Metric["cgroup"], runGroup) && len(m.Values) > 0 {
			t.Logf("%s: the run's workload marked at %v, its first sample thrashing", file.Name, m.Values[0][0])
			return
		}
	}
	t.Errorf("%s: the \"Workloads thrashing\" annotation (%s) marks no onset of the run's workload, whose first sample was already thrashing: %d series", file.Name, expr, len(marks))
}

// checkDemandPlateau holds working_set_ratio, the consumers' measured demand
// over the limit, to the arithmetic one (active consumers × S over the
// limit, which the observer exports as run_demand_bytes) where the latter is
// near its peak: the medians within 25 %. The wall-clock working set cannot
// pass the limit much, so this is what the demand exists for.
func checkDemandPlateau(t *testing.T, p *promServer, start, end time.Time) {
	t.Helper()
	series := func(q string) map[int64]float64 {
		res, err := p.queryRange(q, start, end, time.Second)
		if err != nil || len(res) != 1 {
			t.Fatalf("%s over the run: %d series, %v; want one", q, len(res), err)
		}
		out := map[int64]float64{}
		for _, v := range res[0].Values {
			ts, ok := v[0].(float64)
			s, _ := v[1].(string)
			f, err := strconv.ParseFloat(s, 64)
			if !ok || err != nil {
				t.Fatalf("%s: bad sample %v", q, v)
			}
			out[int64(ts)] = f
		}
		return out
	}
	measured := series(`thrashscope_working_set_ratio`)
	arith := series(`thrashscope_run_demand_bytes / thrashscope_run_memory_limit_bytes`)
	peak := 0.0
	for _, v := range arith {
		peak = max(peak, v)
	}
	var got, want []float64
	for ts, a := range arith {
		if m, ok := measured[ts]; ok && a >= 0.9*peak {
			got, want = append(got, m), append(want, a)
		}
	}
	if len(got) < 3 {
		t.Fatalf("only %d samples of the working-set ratio where the arithmetic demand is within 10%% of its peak %.2f", len(got), peak)
	}
	g, a := medianOf(got), medianOf(want)
	t.Logf("demand plateau (%d samples): working_set_ratio median %.2f, arithmetic %.2f (peak %.2f): %+.0f%%", len(got), g, a, peak, 100*(g/a-1))
	if g < 0.75*a || g > 1.25*a {
		t.Errorf("working_set_ratio's plateau median %.2f is more than 25%% from the arithmetic demand %.2f", g, a)
	}
}

func medianOf(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
