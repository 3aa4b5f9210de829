// Package dashboards holds thrashscope's Grafana dashboards, the last step
// of the data flow: they read the observer's metrics, and the recording
// rules of deploy/prometheus/rules/thrashscope.yml, from Prometheus.
//
// The JSON files are generated from internal/build with the Grafana
// Foundation SDK (go generate) and embedded here, decoded back through the
// SDK's strict decoder and validation, so tests can walk every panel,
// annotation and variable, turn their Grafana variables into real PromQL
// and run it.
package dashboards

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
)

//go:generate go run gen.go

//go:embed *.json
var files embed.FS

// Dashboard is one Grafana dashboard, in the SDK's model.
type Dashboard struct {
	dashboard.Dashboard
}

// File is one shipped dashboard.
type File struct {
	Name      string // thrashscope.json
	JSON      []byte
	Dashboard Dashboard
}

// All returns every shipped dashboard, decoded strictly, sorted by file
// name.
func All() ([]File, error) {
	names, err := fs.Glob(files, "*.json")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := make([]File, 0, len(names))
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		d, err := Decode(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, File{Name: name, JSON: b, Dashboard: d})
	}
	return out, nil
}

// Encode writes a dashboard as the shipped files are written: two-space
// indent, a final newline, no HTML escaping (PromQL has < and >).
func Encode(d dashboard.Dashboard) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Rows returns the dashboard's rows in layout order.
func (d Dashboard) Rows() []dashboard.RowPanel {
	var out []dashboard.RowPanel
	for _, p := range d.Panels {
		if p.RowPanel != nil {
			out = append(out, *p.RowPanel)
		}
	}
	return out
}

// AllPanels returns every panel but the rows in layout order, with the
// panels of collapsed rows where their row is, and the title of the row
// each sits under ("" above the first row).
func (d Dashboard) AllPanels() []Panel {
	var out []Panel
	row := ""
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			out = append(out, Panel{Panel: *p.Panel, Row: row})
		case p.RowPanel != nil:
			row = deref(p.RowPanel.Title)
			for _, c := range p.RowPanel.Panels {
				out = append(out, Panel{Panel: c, Row: row})
			}
		}
	}
	return out
}

// Panel is a panel and the title of its row.
type Panel struct {
	dashboard.Panel
	Row string
}

// ID is the panel's id, 0 if it has none.
func (p Panel) ID() int { return int(deref(p.Id)) }

// Title is the panel's title.
func (p Panel) Title() string { return deref(p.Panel.Title) }

// Prometheus returns the panel's queries, or an error naming one that is
// not a Prometheus query.
func (p Panel) Prometheus() ([]*prometheus.Dataquery, error) {
	out := make([]*prometheus.Dataquery, 0, len(p.Targets))
	for i, t := range p.Targets {
		q, ok := t.(*prometheus.Dataquery)
		if !ok {
			return nil, fmt.Errorf("panel %q target %d is a %T, not a Prometheus query", p.Title(), i, t)
		}
		out = append(out, q)
	}
	return out, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Query kinds.
const (
	KindPanel      = "panel"
	KindAnnotation = "annotation"
	KindVariable   = "variable"
)

// Query is one PromQL expression of a dashboard and where it comes from.
type Query struct {
	Kind    string // KindPanel, KindAnnotation or KindVariable
	Title   string // the panel's title, or the annotation's or variable's name
	Row     string // panels only: the row it sits under
	PanelID int    // panels only
	RefID   string // panels only
	Expr    string // with Grafana variables, as written
	Legend  string // legendFormat, or an annotation's title and text formats
	Instant bool
	Format  string
}

func (q Query) String() string {
	if q.Kind == KindPanel {
		return fmt.Sprintf("panel %q (id %d) query %s: %s", q.Title, q.PanelID, q.RefID, q.Expr)
	}
	return fmt.Sprintf("%s %q: %s", q.Kind, q.Title, q.Expr)
}

// labelValues matches Grafana's label_values(metric, label) variable query.
var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)\s*$`)

// Queries returns every PromQL expression of the dashboard: each panel's
// targets (collapsed rows included), each annotation query, and the series
// selector of each label_values(metric, label) variable. A target that is
// not a Prometheus query is an error.
func (d Dashboard) Queries() ([]Query, error) {
	var out []Query
	for _, p := range d.AllPanels() {
		qs, err := p.Prometheus()
		if err != nil {
			return nil, err
		}
		for _, t := range qs {
			format := ""
			if t.Format != nil {
				format = string(*t.Format)
			}
			out = append(out, Query{Kind: KindPanel, Title: p.Title(), Row: p.Row, PanelID: p.ID(), RefID: deref(t.RefId),
				Expr: t.Expr, Legend: deref(t.LegendFormat), Instant: deref(t.Instant), Format: format})
		}
	}
	for _, a := range d.Annotations.List {
		if expr := deref(a.Expr); expr != "" {
			out = append(out, Query{Kind: KindAnnotation, Title: a.Name, Expr: expr,
				Legend: deref(a.TitleFormat) + " " + deref(a.TextFormat)})
		}
	}
	for _, v := range d.Templating.List {
		if m := labelValues.FindStringSubmatch(variableQuery(v)); v.Type == "query" && m != nil {
			out = append(out, Query{Kind: KindVariable, Title: v.Name, Expr: m[1], Legend: "{{" + m[2] + "}}"})
		}
	}
	return out, nil
}

// variableQuery is a variable's query when it is a string: the plugin id
// of a datasource variable, label_values(...) of a query variable.
func variableQuery(v dashboard.VariableModel) string {
	if v.Query == nil {
		return ""
	}
	return deref(v.Query.String)
}

// Variable returns the dashboard variable of that name.
func (d Dashboard) Variable(name string) (dashboard.VariableModel, bool) {
	for _, v := range d.Templating.List {
		if v.Name == name {
			return v, true
		}
	}
	return dashboard.VariableModel{}, false
}

// Vars are the values Grafana would substitute into a query.
type Vars struct {
	Values     map[string][]string // dashboard variables: instance → its selected values
	Datasource string              // the data source uid for ${datasource}
	Step       time.Duration       // $__interval: the query step
	Scrape     time.Duration       // the data source's scrape interval (timeInterval)
	Range      time.Duration       // the dashboard's time range, for $__range
}

// RateInterval is Grafana's $__rate_interval: max($__interval + scrape
// interval, 4 × scrape interval), so a rate always spans four scrapes.
func (v Vars) RateInterval() time.Duration {
	return max(v.Step+v.Scrape, 4*v.Scrape)
}

// variableRef is Grafana's variable syntax: $name, [[name]] or
// ${name} / ${name:format}.
var variableRef = regexp.MustCompile(`\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?::(\w+))?\}`)

// Expand substitutes Grafana's variables into expr, as Grafana does for a
// Prometheus query: a multi-value or include-all variable becomes an
// alternation of regex-escaped values, a single value is used as is.
// A variable the dashboard does not define is an error.
func (d Dashboard) Expand(expr string, v Vars) (string, error) {
	var unknown []string
	out := variableRef.ReplaceAllStringFunc(expr, func(ref string) string {
		m := variableRef.FindStringSubmatch(ref)
		name, format := m[1]+m[2]+m[4], m[3]+m[5]
		if s, ok := v.builtin(name); ok {
			return s
		}
		if name == "datasource" {
			return v.Datasource
		}
		def, ok := d.Variable(name)
		values, set := v.Values[name]
		if !ok || !set {
			unknown = append(unknown, ref)
			return ref
		}
		return formatValues(values, format, deref(def.Multi) || deref(def.IncludeAll))
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("no value for %s in %q: the dashboard does not define it, or Vars lacks it", strings.Join(unknown, ", "), expr)
	}
	return out, nil
}

// builtin returns Grafana's global variables.
func (v Vars) builtin(name string) (string, bool) {
	switch name {
	case "__interval":
		return promDuration(v.Step), true
	case "__interval_ms":
		return strconv.FormatInt(v.Step.Milliseconds(), 10), true
	case "__rate_interval":
		return promDuration(v.RateInterval()), true
	case "__range":
		return promDuration(v.Range), true
	case "__range_s":
		return strconv.FormatInt(int64(v.Range/time.Second), 10), true
	case "__range_ms":
		return strconv.FormatInt(v.Range.Milliseconds(), 10), true
	}
	return "", false
}

// promDuration writes a duration as PromQL reads it (whole milliseconds).
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// regexSpecial are the characters Grafana escapes in the values of a
// multi-value variable (prometheusSpecialRegexEscape).
var regexSpecial = regexp.MustCompile(`[$^*{}\[\]+?.()|]`)

// formatValues renders a variable's values as Grafana's Prometheus data
// source does. Backslashes are doubled once more than the regex needs: the
// value lands in a PromQL string, which unescapes once.
func formatValues(values []string, format string, multi bool) string {
	if format == "raw" {
		return strings.Join(values, ",")
	}
	if !multi && format != "regex" {
		s := strings.Join(values, ",")
		return strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `'`, `\\'`)
	}
	esc := make([]string, len(values))
	for i, s := range values {
		s = strings.ReplaceAll(s, `\`, `\\\\`)
		esc[i] = regexSpecial.ReplaceAllString(s, `\\$0`)
	}
	if len(esc) == 1 {
		return esc[0]
	}
	return "(" + strings.Join(esc, "|") + ")"
}

var promql = parser.NewParser(parser.Options{})

// Parse parses an expanded expression with the Prometheus parser.
func Parse(expr string) (parser.Expr, error) {
	return promql.ParseExpr(expr)
}

// Metrics returns the metric names an expanded expression reads, sorted
// and without duplicates.
func Metrics(expr string) ([]string, error) {
	e, err := Parse(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			if name == "" {
				for _, m := range vs.LabelMatchers {
					if m.Name == "__name__" {
						name = m.Value
					}
				}
			}
			names = append(names, name)
		}
		return nil
	})
	slices.Sort(names)
	return slices.Compact(names), nil
}
