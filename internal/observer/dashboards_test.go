package observer

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/dashboards"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// The dashboards' real checks, run inside TestAlertsFireOnARealThrash so
// they share its induced run: every metric a dashboard names is in a real
// scrape, and every panel, annotation and variable query returns data from
// the real Prometheus that scraped the run.

// dashboardStep is the query step of the checks: the observer is scraped
// every second, Grafana's smallest sensible step is 1-2 s.
const dashboardStep = 2 * time.Second

func shippedDashboards(t *testing.T) []dashboards.File {
	t.Helper()
	files, err := dashboards.All()
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// dashboardVars are Grafana's variables for one observer, as Prometheus
// labels it, over a window at dashboardStep.
func dashboardVars(instance string, window time.Duration) dashboards.Vars {
	return dashboards.Vars{
		Values:     map[string][]string{"instance": {instance}},
		Datasource: "prometheus",
		Step:       dashboardStep,
		Scrape:     time.Second, // startPrometheus's scrape_interval
		Range:      window,
	}
}

// dashboardMetrics follows which of the observer metrics the dashboards
// name have shown up in a scrape. Recording rules (level:metric:op) are not
// the observer's: the dashboards' unit tests check them against the rules
// file, and checkDashboardQueries runs them.
type dashboardMetrics struct {
	users map[string][]string // metric → the queries that read it
	seen  map[string]bool
}

func newDashboardMetrics(t *testing.T) *dashboardMetrics {
	t.Helper()
	m := &dashboardMetrics{users: map[string][]string{}, seen: map[string]bool{}}
	for _, f := range shippedDashboards(t) {
		qs, err := f.Dashboard.Queries()
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			expr, err := f.Dashboard.Expand(q.Expr, dashboardVars("127.0.0.1:9752", time.Minute))
			if err != nil {
				t.Fatalf("%s: %v", f.Name, err)
			}
			names, err := dashboards.Metrics(expr)
			if err != nil {
				t.Fatalf("%s: %s: %v", f.Name, q, err)
			}
			for _, n := range names {
				if !strings.Contains(n, ":") {
					m.users[n] = append(m.users[n], f.Name+": "+q.Kind+" "+q.Title)
				}
			}
		}
	}
	if len(m.users) < 20 {
		t.Fatalf("the dashboards name only %d observer metrics", len(m.users))
	}
	return m
}

// scrape reads the observer's /metrics once and notes the sample names
// found; it reports whether every dashboard metric has been seen.
func (m *dashboardMetrics) scrape(t *testing.T, observerURL string) bool {
	t.Helper()
	if len(m.seen) == len(m.users) {
		return true
	}
	resp, err := http.Get(observerURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	testenv.NoDuplicateSeries(t, string(body))
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		if _, ok := m.users[name]; ok {
			m.seen[name] = true
		}
	}
	return len(m.seen) == len(m.users)
}

// check fails for every dashboard metric no scrape had.
func (m *dashboardMetrics) check(t *testing.T) {
	t.Helper()
	var missing []string
	for name, users := range m.users {
		if !m.seen[name] {
			missing = append(missing, fmt.Sprintf("%s (read by %s)", name, strings.Join(slices.Compact(users), "; ")))
		}
	}
	slices.Sort(missing)
	for _, s := range missing {
		t.Errorf("dashboard metric not in any scrape of the observer during the run: %s", s)
	}
	if len(missing) == 0 {
		t.Logf("dashboards: all %d observer metrics they name were in a scrape during the run", len(m.users))
	}
}

type promSeries struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// queryRange runs a range query; an error is returned, not fatal, so one
// bad expression does not hide the others.
func (p *promServer) queryRange(q string, from, to time.Time, step time.Duration) ([]promSeries, error) {
	v := url.Values{
		"query": {q},
		"start": {strconv.FormatFloat(float64(from.UnixMilli())/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(to.UnixMilli())/1000, 'f', 3, 64)},
		"step":  {step.String()},
	}
	resp, err := http.Get(p.url + "/api/v1/query_range?" + v.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promSeries `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("%d: %w", resp.StatusCode, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%d: %s", resp.StatusCode, body.Error)
	}
	return body.Data.Result, nil
}

// mustMove are queries (panel title/refId) that show the thrash itself:
// over a run they must not only return series but a non-zero sample.
var mustMove = map[string]bool{
	"Paging: swap-in and swap-out/A":                true,
	"Paging: swap-in and swap-out/B":                true,
	"Major faults per process: swap-ins and file/A": true,
	"Memory pressure (PSI)/A":                       true,
	"Major-fault service time/A":                    true,
	"Write-cycle duration/A":                        true,
	"Thrash detector state/A":                       true,
	"Consumers: active and planned/A":               true,
	"Demand and limit/A":                            true,
}

var legendLabel = strings.NewReplacer("{{", "\x00", "}}", "\x00")

// legendLabels returns the labels a legend, title or text format shows.
func legendLabels(format string) []string {
	parts := strings.Split(legendLabel.Replace(format), "\x00")
	var out []string
	for i := 1; i < len(parts); i += 2 {
		out = append(out, strings.TrimSpace(parts[i]))
	}
	return out
}

// checkDashboardQueries runs every query of every shipped dashboard, with
// Grafana's variables for instance, over [from, to] at dashboardStep, and
// fails for each that returns no series, or series without the labels its
// legend shows.
func checkDashboardQueries(t *testing.T, p *promServer, instance string, from, to time.Time) {
	t.Helper()
	began := time.Now()
	n := 0
	// An event annotation needs its event inside the window: say so when
	// the host was already thrashing before the run (another thrash on it).
	hint := ""
	if res, err := p.queryRange(`thrashscope_thrashing_state{instance="`+instance+`"}`, from, from, dashboardStep); err == nil &&
		len(res) == 1 && len(res[0].Values) == 1 && fmt.Sprint(res[0].Values[0][1]) != "0" {
		hint = fmt.Sprintf("; the detector was already in state %v when the window began: was another thrash running on this host?", res[0].Values[0][1])
	}
	for _, f := range shippedDashboards(t) {
		d := f.Dashboard
		qs, err := d.Queries()
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			n++
			expr, err := d.Expand(q.Expr, dashboardVars(instance, to.Sub(from)))
			if err != nil {
				t.Errorf("%s: %v", f.Name, err)
				continue
			}
			res, err := p.queryRange(expr, from, to, dashboardStep)
			if err != nil {
				t.Errorf("%s: %s: query %s failed: %v", f.Name, q, expr, err)
				continue
			}
			points, peak := 0, 0.0
			for _, s := range res {
				points += len(s.Values)
				for _, v := range s.Values {
					if x, err := strconv.ParseFloat(fmt.Sprint(v[1]), 64); err == nil {
						peak = max(peak, x)
					}
				}
				for _, l := range legendLabels(q.Legend) {
					if _, ok := s.Metric[l]; !ok {
						t.Errorf("%s: %s: a series lacks the label {{%s}} its legend shows: %v", f.Name, q, l, s.Metric)
						break
					}
				}
			}
			switch {
			case len(res) == 0:
				t.Errorf("%s: %s returned no series over the run (%s from %s to %s, step %s)%s",
					f.Name, q, expr, from.Format(time.TimeOnly), to.Format(time.TimeOnly), dashboardStep, hint)
			case q.Kind == dashboards.KindPanel && mustMove[q.Title+"/"+q.RefID] && peak == 0:
				t.Errorf("%s: %s stayed at zero through the thrash", f.Name, q)
			default:
				t.Logf("%s: %s %q %s: %d series, %d points, peak %.4g", f.Name, q.Kind, q.Title, q.RefID, len(res), points, peak)
			}
		}
	}
	t.Logf("dashboards: ran %d queries over %s in %s", n, to.Sub(from).Round(time.Second), time.Since(began).Round(time.Millisecond))
}
