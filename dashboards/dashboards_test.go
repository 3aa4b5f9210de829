package dashboards_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/thrashscope/thrashscope/dashboards"
	"github.com/thrashscope/thrashscope/dashboards/internal/build"
)

func all(t *testing.T) []dashboards.File {
	t.Helper()
	files, err := dashboards.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("shipped dashboards: %d, want thrashscope.json, fleet.json and workloads.json", len(files))
	}
	return files
}

func byUID(t *testing.T, uid string) dashboards.Dashboard {
	t.Helper()
	for _, f := range all(t) {
		if deref(f.Dashboard.Uid) == uid {
			return f.Dashboard
		}
	}
	t.Fatalf("no dashboard with uid %q", uid)
	return dashboards.Dashboard{}
}

// testVars are what Grafana would substitute for one observer at a 2s step.
var testVars = dashboards.Vars{
	Values:     map[string][]string{"instance": {"127.0.0.1:9752"}},
	Datasource: "prometheus",
	Step:       2 * time.Second,
	Scrape:     time.Second,
	Range:      15 * time.Minute,
}

func TestJSONIsGenerated(t *testing.T) {
	want, err := build.Files()
	if err != nil {
		t.Fatal(err)
	}
	again, err := build.Files()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	for _, f := range all(t) {
		got[f.Name] = f.JSON
	}
	for name, b := range want {
		if !bytes.Equal(again[name], b) {
			t.Errorf("%s: two builds differ: internal/build is not deterministic (map order?)", name)
		}
		if !bytes.Equal(got[name], b) {
			t.Errorf("%s differs from internal/build: run go generate ./dashboards (and edit panels in internal/build, not the JSON)", name)
		}
	}
	if len(got) != len(want) {
		t.Errorf("shipped %d dashboards, internal/build makes %d", len(got), len(want))
	}
}

// TestDecodeIsStrict: every file decodes through the SDK's strict decoder
// and validation with no field left over, and its types keep every field
// (a semantic round trip); a hand-edited panel with a field the SDK does
// not know fails.
func TestDecodeIsStrict(t *testing.T) {
	for _, f := range all(t) {
		again, err := dashboards.Encode(f.Dashboard.Dashboard)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal(f.JSON, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(again, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: decoding and encoding again changes it: the SDK's types drop or alter a field", f.Name)
		}
	}
	// Hand edits of a shipped panel: each must fail, naming where.
	f := all(t)[0]
	for _, c := range []struct{ what, from, to string }{
		{"a misspelt panel field", `"gridPos": {`, `"gridPosition": {}, "gridPos": {`},
		{"a misspelt field option", `"unit": "short"`, `"unti": "short"`},
		{"a mapping of an unknown type", `"type": "value"`, `"type": "values"`},
		{"a misspelt option", `"lineInterpolation": "smooth"`, `"lineInterpolaton": "smooth"`},
		{"an unknown panel option", `"legend": {`, `"legand": {}, "legend": {`},
		{"a query field of the wrong type", `"refId": "A"`, `"refId": 1`},
		{"a second object", "\n}\n", "\n}\n{}"},
	} {
		bad := strings.Replace(string(f.JSON), c.from, c.to, 1)
		if bad == string(f.JSON) {
			t.Fatalf("%s: %q not in %s", c.what, c.from, f.Name)
		}
		if _, err := dashboards.Decode([]byte(bad)); err == nil {
			t.Errorf("Decode accepted %s in %s", c.what, f.Name)
		} else {
			t.Logf("%s: %v", c.what, err)
		}
	}
}

func TestDashboardSettings(t *testing.T) {
	for uid, title := range map[string]string{"thrashscope": "thrashscope", "thrashscope-fleet": "thrashscope fleet",
		"thrashscope-workloads": "thrashscope workloads"} {
		d := byUID(t, uid)
		if deref(d.Title) != title {
			t.Errorf("%s: title %q, want %q", uid, deref(d.Title), title)
		}
		if d.Id != nil {
			t.Errorf("%s: id %d, want none so Grafana assigns it", uid, *d.Id)
		}
		if d.SchemaVersion != 39 {
			t.Errorf("%s: schemaVersion %d, want 39 (Grafana 10.4, loaded by 10 and later)", uid, d.SchemaVersion)
		}
		if d.Time == nil || d.Time.From != "now-15m" || d.Time.To != "now" || deref(d.Refresh) != "5s" {
			t.Errorf("%s: time %+v refresh %q, want the last 15 min every 5s", uid, d.Time, deref(d.Refresh))
		}
		if deref(d.Description) == "" || !slices.Contains(d.Tags, "thrashscope") {
			t.Errorf("%s: needs a description and the thrashscope tag", uid)
		}
		ds, ok := d.Variable("datasource")
		if !ok || ds.Type != "datasource" || ds.Query == nil || deref(ds.Query.String) != "prometheus" {
			t.Errorf("%s: datasource variable %+v, want type datasource of plugin prometheus", uid, ds)
		}
		inst, ok := d.Variable("instance")
		if !ok || inst.Type != "query" || inst.Query == nil || deref(inst.Query.String) != "label_values(thrashscope_build_info, instance)" ||
			inst.Datasource == nil || deref(inst.Datasource.Uid) != "${datasource}" {
			t.Errorf("%s: instance variable %+v, want label_values(thrashscope_build_info, instance) on ${datasource}", uid, inst)
		}
		if d.Templating.List[0].Name != "datasource" {
			t.Errorf("%s: the datasource variable must come first: the others query it", uid)
		}
	}
	if inst, _ := byUID(t, "thrashscope").Variable("instance"); deref(inst.Multi) || deref(inst.IncludeAll) {
		t.Error("thrashscope: instance must be a single host")
	}
	if inst, _ := byUID(t, "thrashscope-fleet").Variable("instance"); !deref(inst.Multi) || !deref(inst.IncludeAll) {
		t.Error("thrashscope-fleet: instance must allow several hosts and All")
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// units are the Grafana unit ids the dashboards may use; Grafana shows any
// other string as a literal suffix, so a typo would go unnoticed.
var units = map[string]bool{
	"none": true, "short": true, "percent": true, "percentunit": true,
	"bytes": true, "binBps": true, "Bps": true, "s": true, "ms": true, "µs": true,
	"ops": true, "cps": true,
}

// customUnit is Grafana's count:<unit> (scaled by K, M) or suffix:<unit>.
var customUnit = regexp.MustCompile(`^(count|suffix):[a-z]+/s$`)

func validUnit(u string) bool { return units[u] || customUnit.MatchString(u) }

// sources are what a description must name: a paper figure, a source
// paper, or the kernel source it reads.
var sources = regexp.MustCompile(`Figs? \d|Maziero et al\.,? 2013|Jiang and Zhang,? 2001|Reuven and Wiseman,? 2006|Denning|Source: `)

func TestPanels(t *testing.T) {
	for _, f := range all(t) {
		d := f.Dashboard
		ids := map[int]string{}
		for _, r := range d.Rows() {
			if r.Id == 0 || deref(r.Title) == "" {
				t.Errorf("%s: row %q (id %d) needs a title and an id", f.Name, deref(r.Title), r.Id)
			}
			ids[int(r.Id)] = deref(r.Title)
		}
		for _, p := range d.AllPanels() {
			where := f.Name + ": panel " + p.Title()
			if prev, dup := ids[p.ID()]; dup || p.ID() <= 0 {
				t.Errorf("%s: id %d, already used by %q", where, p.ID(), prev)
			}
			ids[p.ID()] = p.Title()
			if p.Title() == "" {
				t.Errorf("%s (id %d): no title", f.Name, p.ID())
			}
			if desc := deref(p.Description); !strings.Contains(desc, "Unit: ") || !sources.MatchString(desc) {
				t.Errorf("%s: description must name its figure or source and say \"Unit: ...\": %q", where, desc)
			}
			if p.FieldConfig == nil || !validUnit(deref(p.FieldConfig.Defaults.Unit)) {
				t.Errorf("%s: fieldConfig.defaults.unit is not a Grafana unit", where)
				continue
			}
			for _, o := range p.FieldConfig.Overrides {
				for _, prop := range o.Properties {
					if u, ok := prop.Value.(string); prop.Id == "unit" && (!ok || !validUnit(u)) {
						t.Errorf("%s: override unit %v is not a Grafana unit", where, prop.Value)
					}
				}
			}
			if p.Datasource == nil || deref(p.Datasource.Type) != "prometheus" || deref(p.Datasource.Uid) != "${datasource}" {
				t.Errorf("%s: datasource %+v, want ${datasource}", where, p.Datasource)
			}
			queries, err := p.Prometheus()
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if len(queries) == 0 {
				t.Errorf("%s: no queries", where)
			}
			refs := map[string]bool{}
			for _, tg := range queries {
				ref := deref(tg.RefId)
				if tg.Datasource == nil || deref(tg.Datasource.Uid) != "${datasource}" {
					t.Errorf("%s query %s: datasource %+v, want ${datasource}", where, ref, tg.Datasource)
				}
				if refs[ref] || ref == "" {
					t.Errorf("%s: refId %q empty or repeated", where, ref)
				}
				refs[ref] = true
			}
			format := func(q *prometheus.Dataquery) prometheus.PromQueryFormat { return deref(q.Format) }
			switch p.Type {
			case "timeseries":
				if c, ok := p.FieldConfig.Defaults.Custom.(*timeseries.FieldConfig); !ok ||
					deref(c.LineInterpolation) != common.LineInterpolationSmooth {
					t.Errorf("%s: lines must be smooth, as the paper's Bézier-smoothed curves", where)
				}
			case "heatmap":
				if o, ok := p.Options.(*heatmap.Options); !ok || o.Calculate == nil || *o.Calculate ||
					!validUnit(deref(o.YAxis.Unit)) || o.RowsFrame == nil || deref(o.RowsFrame.Layout) != common.HeatmapCellLayoutLe {
					t.Errorf("%s: a heatmap of a Prometheus histogram shows its own le buckets (calculate false, rowsFrame le, a y unit)", where)
				}
				for _, tg := range queries {
					if format(tg) != prometheus.PromQueryFormatHeatmap || !strings.Contains(tg.Expr, "_bucket") || !strings.Contains(tg.Expr, "by (le)") {
						t.Errorf("%s: query %s must sum _bucket rates by le with format heatmap", where, deref(tg.RefId))
					}
				}
			case "table":
				for _, tg := range queries {
					if !deref(tg.Instant) || deref(tg.Range) || format(tg) != prometheus.PromQueryFormatTable {
						t.Errorf("%s: query %s must be an instant table query", where, deref(tg.RefId))
					}
				}
				if len(p.Transformations) == 0 || p.Transformations[0].Id != "merge" {
					t.Errorf("%s: the queries must be merged into one row per key", where)
				}
			case "state-timeline":
				checkStateMappings(t, where, p.FieldConfig.Defaults.Mappings)
			case "stat":
			default:
				t.Errorf("%s: unexpected panel type %q", where, p.Type)
			}
		}
		checkLayout(t, f.Name, d)
	}
}

func checkStateMappings(t *testing.T, where string, mappings []dashboard.ValueMapping) {
	t.Helper()
	type result struct {
		text, color string
		index       int32
	}
	want := map[string]result{"0": {"normal", "green", 0}, "1": {"monitoring", "yellow", 1}, "2": {"thrashing", "red", 2}}
	got := map[string]result{}
	if len(mappings) == 1 && mappings[0].ValueMap != nil && mappings[0].ValueMap.Type == dashboard.MappingTypeValueToText {
		for v, r := range mappings[0].ValueMap.Options {
			got[v] = result{deref(r.Text), deref(r.Color), deref(r.Index)}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: state mappings %+v, want 0 normal (green), 1 monitoring (yellow), 2 thrashing (red)", where, got)
	}
}

// checkLayout: panels fit the 24-column grid without overlapping, both at
// the top level and inside each collapsed row (below the row itself).
func checkLayout(t *testing.T, name string, d dashboards.Dashboard) {
	t.Helper()
	type box struct {
		title string
		g     dashboard.GridPos
	}
	overlap := func(a, b dashboard.GridPos) bool {
		return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
	}
	check := func(boxes []box, minY uint32) {
		for i, p := range boxes {
			g := p.g
			if g.W == 0 || g.H == 0 || g.X+g.W > 24 || g.Y < minY {
				t.Errorf("%s: panel %q at %+v is off the grid", name, p.title, g)
			}
			for _, q := range boxes[:i] {
				if overlap(g, q.g) {
					t.Errorf("%s: panels %q %+v and %q %+v overlap", name, q.title, q.g, p.title, g)
				}
			}
		}
	}
	var top []box
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil && p.Panel.GridPos != nil:
			top = append(top, box{deref(p.Panel.Title), *p.Panel.GridPos})
		case p.RowPanel != nil && p.RowPanel.GridPos != nil:
			r := p.RowPanel
			top = append(top, box{deref(r.Title), *r.GridPos})
			if len(r.Panels) == 0 {
				continue
			}
			if !r.Collapsed {
				t.Errorf("%s: row %q holds panels but is not collapsed", name, deref(r.Title))
			}
			var inside []box
			for _, c := range r.Panels {
				if c.GridPos == nil {
					t.Errorf("%s: panel %q has no position", name, deref(c.Title))
					continue
				}
				inside = append(inside, box{deref(c.Title), *c.GridPos})
			}
			check(inside, r.GridPos.Y+1)
		default:
			t.Errorf("%s: a panel or row has no position", name)
		}
	}
	check(top, 0)
}

// TestRowsReadLikeThePaper: the host dashboard's rows, in order, each
// with the metrics its panels must show.
func TestRowsReadLikeThePaper(t *testing.T) {
	d := byUID(t, "thrashscope")
	var rows []string
	for _, r := range d.Rows() {
		rows = append(rows, deref(r.Title))
	}
	if want := []string{"Paper figures", "Processes", "Detector", "Run"}; !slices.Equal(rows, want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
	want := map[string][]string{
		"Paper figures": {"thrashscope:cpu_seconds:ratio_rate10s", "thrashscope:swap_in_pages:rate10s",
			"thrashscope:swap_out_pages:rate10s", "thrashscope_paged_in_bytes_total", "thrashscope_paged_out_bytes_total"},
		"Processes": {"thrashscope:process_major_faults:rate30s", "thrashscope:process_memory_stall_seconds:rate30s",
			"thrashscope_process_working_set_bytes", "thrashscope_process_resident_bytes", "thrashscope_process_virtual_bytes",
			"thrashscope_process_swap_bytes", "thrashscope_process_high_fault"},
		"Detector": {"thrashscope_thrashing_state", "thrashscope_high_fault_processes", "thrashscope_working_set_ratio",
			"thrashscope:pressure_memory_stalled_seconds:rate10s", "thrashscope_workingset_refaults_total",
			"thrashscope_workingset_restores_total", "thrashscope_major_fault_latency_seconds_bucket"},
		"Run": {"thrashscope_run_info", "thrashscope_run_consumers_active", "thrashscope_run_consumers_planned",
			"thrashscope_run_demand_bytes", "thrashscope_run_memory_limit_bytes",
			"thrashscope_run_write_cycle_duration_seconds_bucket", "thrashscope_run_consumer_lateness_seconds"},
	}
	got := map[string]map[string]bool{}
	for _, q := range queries(t, d) {
		if q.Kind != dashboards.KindPanel {
			continue
		}
		expr, err := d.Expand(q.Expr, testVars)
		if err != nil {
			t.Fatal(err)
		}
		names, err := dashboards.Metrics(expr)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if got[q.Row] == nil {
			got[q.Row] = map[string]bool{}
		}
		for _, n := range names {
			got[q.Row][n] = true
		}
	}
	for row, names := range want {
		for _, n := range names {
			if !got[row][n] {
				t.Errorf("row %q shows no panel of %s", row, n)
			}
		}
	}
	// The paper's figures are cited where they are mirrored.
	for _, p := range d.AllPanels() {
		if p.Row == "Paper figures" && !regexp.MustCompile(`Figs \d+, \d+, \d+ and \d+`).MatchString(deref(p.Description)) {
			t.Errorf("paper figure panel %q cites no figures: %q", p.Title(), deref(p.Description))
		}
	}
	if run := d.Rows()[3]; len(run.Panels) == 0 {
		t.Error("the Run row is collapsed and must hold its panels")
	}
	// Run start and end, and detector transitions, as annotations.
	var annotations []string
	for _, a := range d.Annotations.List {
		annotations = append(annotations, deref(a.Expr))
	}
	for _, m := range []string{"thrashscope_run_info", "thrashscope_runs_total", "thrashscope_detector_transitions_total"} {
		if !strings.Contains(strings.Join(annotations, "\n"), m) {
			t.Errorf("no annotation reads %s", m)
		}
	}
}

func queries(t *testing.T, d dashboards.Dashboard) []dashboards.Query {
	t.Helper()
	qs, err := d.Queries()
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

// recordingRules parses deploy/prometheus/rules/thrashscope.yml.
func recordingRules(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "rules", "thrashscope.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatalf("rules file: %v", err)
	}
	rules := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				rules[r.Record] = true
			}
		}
	}
	if len(rules) == 0 {
		t.Fatal("no recording rules in the rules file")
	}
	return rules
}

var legendLabel = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// TestQueries: every panel, annotation and variable query parses as
// PromQL once Grafana's variables are in, reads only thrashscope metrics
// and the shipped recording rules, and is restricted to $instance (but
// the variable that lists the instances).
func TestQueries(t *testing.T) {
	rules := recordingRules(t)
	for _, f := range all(t) {
		d := f.Dashboard
		queries := queries(t, d)
		kinds := map[string]int{}
		for _, q := range queries {
			kinds[q.Kind]++
			expr, err := d.Expand(q.Expr, testVars)
			if err != nil {
				t.Errorf("%s: %s: %v", f.Name, q, err)
				continue
			}
			e, err := dashboards.Parse(expr)
			if err != nil {
				t.Errorf("%s: %s does not parse: %v", f.Name, q, err)
				continue
			}
			names, _ := dashboards.Metrics(expr)
			for _, n := range names {
				switch {
				case strings.Contains(n, ":"):
					if !rules[n] {
						t.Errorf("%s: %s reads %s, which deploy/prometheus/rules/thrashscope.yml does not record", f.Name, q, n)
					}
				case !strings.HasPrefix(n, "thrashscope_"):
					t.Errorf("%s: %s reads %q, not a thrashscope metric", f.Name, q, n)
				}
			}
			parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok || q.Kind == dashboards.KindVariable { // it lists the instances
					return nil
				}
				for _, m := range vs.LabelMatchers {
					if m.Name == "instance" && m.Matches("127.0.0.1:9752") && !m.Matches("127.0.0.1:9753") {
						return nil
					}
				}
				t.Errorf("%s: %s: selector %s is not restricted to $instance", f.Name, q, vs)
				return nil
			})
			// Labels a legend or title shows must survive the aggregation.
			if agg, ok := e.(*parser.AggregateExpr); ok && !agg.Without && agg.Op != parser.TOPK && agg.Op != parser.BOTTOMK {
				for _, m := range legendLabel.FindAllStringSubmatch(q.Legend, -1) {
					if !slices.Contains(agg.Grouping, m[1]) {
						t.Errorf("%s: %s: legend shows {{%s}}, which %s by %v drops", f.Name, q, m[1], agg.Op, agg.Grouping)
					}
				}
			}
		}
		if kinds[dashboards.KindAnnotation] == 0 || kinds[dashboards.KindVariable] != 1 {
			t.Errorf("%s: queries by kind %v, want annotations and the instance variable", f.Name, kinds)
		}
		for _, a := range d.Annotations.List {
			if a.Datasource == nil || deref(a.Datasource.Uid) != "${datasource}" || deref(a.Expr) == "" || deref(a.Step) == "" {
				t.Errorf("%s: annotation %q must be a Prometheus query on ${datasource} with a step", f.Name, a.Name)
			}
		}
	}
}

func TestExpand(t *testing.T) {
	host := byUID(t, "thrashscope")
	fleet := byUID(t, "thrashscope-fleet")
	vars := func(step time.Duration, instances ...string) dashboards.Vars {
		v := testVars
		v.Step = step
		v.Values = map[string][]string{"instance": instances}
		return v
	}
	for _, c := range []struct {
		d          dashboards.Dashboard
		expr, want string
		v          dashboards.Vars
	}{
		{host, `up{instance="$instance"}`, `up{instance="10.0.0.1:9752"}`, vars(time.Second, "10.0.0.1:9752")},
		{host, `up{instance="${instance}"}`, `up{instance="10.0.0.1:9752"}`, vars(time.Second, "10.0.0.1:9752")},
		{host, `up{instance="[[instance]]"}`, `up{instance="10.0.0.1:9752"}`, vars(time.Second, "10.0.0.1:9752")},
		{host, `up{instance=~"${instance:regex}"}`, `up{instance=~"10\\.0\\.0\\.1:9752"}`, vars(time.Second, "10.0.0.1:9752")},
		// $__rate_interval spans at least four scrapes, else a step and a scrape.
		{host, `rate(x[$__rate_interval])`, `rate(x[4s])`, vars(2 * time.Second)},
		{host, `rate(x[${__rate_interval}])`, `rate(x[11s])`, vars(10 * time.Second)},
		{host, `rate(x[$__interval]) / $__interval_ms`, `rate(x[1500ms]) / 1500`, vars(1500 * time.Millisecond)},
		{host, `increase(x[$__range]) / $__range_s`, `increase(x[900s]) / 900`, vars(time.Second)},
		{host, `${datasource}`, `prometheus`, vars(time.Second)},
		// Several values of a multi-value variable: an escaped alternation.
		{fleet, `up{instance=~"$instance"}`, `up{instance=~"(a\\.b:1|c\\.d:2)"}`, vars(time.Second, "a.b:1", "c.d:2")},
		{fleet, `up{instance=~"$instance"}`, `up{instance=~"a\\.b:1"}`, vars(time.Second, "a.b:1")},
		// :raw passes a value through, as Grafana passes an allValue.
		{fleet, `up{instance=~"${instance:raw}"}`, `up{instance=~".*"}`, vars(time.Second, ".*")},
	} {
		got, err := c.d.Expand(c.expr, c.v)
		if err != nil || got != c.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", c.expr, got, err, c.want)
		}
	}
	// The escaped form is what the Prometheus parser reads as the regex.
	e, err := fleet.Expand(`up{instance=~"$instance"}`, vars(time.Second, "a.b:1", "c.d:2"))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := dashboards.Parse(e)
	if err != nil {
		t.Fatal(err)
	}
	m := vs.(*parser.VectorSelector).LabelMatchers[0]
	if !m.Matches("a.b:1") || !m.Matches("c.d:2") || m.Matches("aXb:1") {
		t.Errorf("%s matches the wrong instances", e)
	}
	for _, bad := range []string{`up{job="$job"}`, `rate(x[$__unknown])`} {
		if got, err := host.Expand(bad, testVars); err == nil || !strings.Contains(err.Error(), "$") {
			t.Errorf("Expand(%q) = %q, %v; want an error naming the variable", bad, got, err)
		}
	}
	if _, err := host.Expand(`up{instance="$instance"}`, dashboards.Vars{}); err == nil {
		t.Error("Expand without a value for $instance succeeded")
	}
}

func TestMetrics(t *testing.T) {
	got, err := dashboards.Metrics(`sum by (le) (rate(a_bucket[1m])) / on () group_left b + {__name__="c"} or vector(0) + a_bucket`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a_bucket", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Metrics = %v, want %v", got, want)
	}
	if _, err := dashboards.Metrics(`rate(x[$__rate_interval])`); err == nil {
		t.Error("Metrics parsed an unexpanded Grafana variable")
	}
}

// TestProvisioning: the provisioning files decode into Grafana's schema and
// point where the compose kit mounts the dashboards.
func TestProvisioning(t *testing.T) {
	decode := func(path string, v any) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var sources struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name      string `yaml:"name"`
			Type      string `yaml:"type"`
			UID       string `yaml:"uid"`
			Access    string `yaml:"access"`
			OrgID     int    `yaml:"orgId"`
			URL       string `yaml:"url"`
			IsDefault bool   `yaml:"isDefault"`
			Editable  bool   `yaml:"editable"`
			JSONData  struct {
				TimeInterval string `yaml:"timeInterval"`
				HTTPMethod   string `yaml:"httpMethod"`
			} `yaml:"jsonData"`
		} `yaml:"datasources"`
	}
	decode(filepath.Join("provisioning", "datasources", "prometheus.yml"), &sources)
	if sources.APIVersion != 1 || len(sources.Datasources) != 1 {
		t.Fatalf("datasources: %+v", sources)
	}
	ds := sources.Datasources[0]
	if ds.Type != "prometheus" || ds.UID != "prometheus" || ds.Access != "proxy" {
		t.Errorf("datasource %+v, want a prometheus with uid prometheus (the dashboards' default)", ds)
	}
	// Grafana expands $VAR with os.ExpandEnv: it has no ${VAR:-default},
	// which would expand to nothing.
	if strings.Contains(ds.URL, ":-") || os.Expand(ds.URL, func(k string) string {
		return map[string]string{"THRASHSCOPE_PROMETHEUS_URL": "http://prometheus:9090"}[k]
	}) != "http://prometheus:9090" {
		t.Errorf("datasource url %q, want $THRASHSCOPE_PROMETHEUS_URL", ds.URL)
	}
	// $__rate_interval is four scrape intervals: tell Grafana the real one.
	var prom struct {
		ScrapeConfigs []struct {
			ScrapeInterval string `yaml:"scrape_interval"`
		} `yaml:"scrape_configs"`
	}
	b, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &prom); err != nil || len(prom.ScrapeConfigs) == 0 {
		t.Fatalf("deploy/prometheus/prometheus.yml: %v", err)
	}
	if ds.JSONData.TimeInterval != prom.ScrapeConfigs[0].ScrapeInterval {
		t.Errorf("datasource timeInterval %q, but deploy/prometheus/prometheus.yml scrapes every %q",
			ds.JSONData.TimeInterval, prom.ScrapeConfigs[0].ScrapeInterval)
	}

	var providers struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name                  string `yaml:"name"`
			OrgID                 int    `yaml:"orgId"`
			Folder                string `yaml:"folder"`
			Type                  string `yaml:"type"`
			DisableDeletion       bool   `yaml:"disableDeletion"`
			AllowUIUpdates        bool   `yaml:"allowUiUpdates"`
			UpdateIntervalSeconds int    `yaml:"updateIntervalSeconds"`
			Options               struct {
				Path                      string `yaml:"path"`
				FoldersFromFilesStructure bool   `yaml:"foldersFromFilesStructure"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	decode(filepath.Join("provisioning", "dashboards", "thrashscope.yml"), &providers)
	if len(providers.Providers) != 1 {
		t.Fatalf("providers: %+v", providers)
	}
	p := providers.Providers[0]
	if p.Type != "file" || p.Folder != "thrashscope" || p.Options.Path != "/var/lib/grafana/dashboards/thrashscope" {
		t.Errorf("provider %+v, want a file provider of /var/lib/grafana/dashboards/thrashscope into folder thrashscope", p)
	}

	// That directory is this one, and Grafana loads every .json beneath
	// it: only the dashboards may be there.
	err = filepath.WalkDir(".", func(path string, e fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".json") && path != "thrashscope.json" && path != "fleet.json" && path != "workloads.json" {
			t.Errorf("%s would be loaded by Grafana as a dashboard", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
