package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/thrashscope/thrashscope/internal/diagnosis"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/settings"
)

const specPath = "../../api/openapi.yaml"

// specCase is one request the handler gets and api/openapi.yaml must
// describe, request and response both.
type specCase struct {
	name           string
	method, target string
	body           string
	header         []string       // name, value pairs
	opts           func(*Options) // changes the handler's options from the defaults
	times          int            // sent this many times in a row; 0 is once
	wantCode       int
	wantErr        string // a prefix of the error message; it names the field
	// offSpec marks a request that breaks the spec on purpose: the spec
	// must refuse it too, so spec and handler agree on what is invalid.
	offSpec bool
}

// specChecker validates exchanges against the spec and records which
// operations and statuses they exercised.
type specChecker struct {
	doc     *openapi3.T
	router  routers.Router
	mu      sync.Mutex
	covered map[string]bool // "METHOD /path STATUS"
}

// The live page is HTML; the validator knows only the text types it was
// told, and an HTML page is a string like text/plain.
func init() {
	openapi3filter.RegisterBodyDecoder("text/html", func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(body)
		return string(b), err
	})
}

func loadSpec(t *testing.T) *specChecker {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specPath)
	if err != nil {
		t.Fatalf("loading %s: %v", specPath, err)
	}
	// Examples are validated too, so they cannot rot.
	if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", specPath, err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("routing %s: %v", specPath, err)
	}
	return &specChecker{doc: doc, router: router, covered: map[string]bool{}}
}

func (s *specChecker) request(tc specCase) *http.Request {
	var req *http.Request
	if tc.body != "" {
		req = httptest.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
	} else {
		req = httptest.NewRequest(tc.method, tc.target, nil)
	}
	for i := 0; i+1 < len(tc.header); i += 2 {
		req.Header.Set(tc.header[i], tc.header[i+1])
	}
	return req
}

// exchange sends tc's request to h and checks the request and the response
// against the spec.
func (s *specChecker) exchange(t *testing.T, h http.Handler, tc specCase) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, s.request(tc))

	ctx := context.Background()
	req := s.request(tc)
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s %s is not in %s: %v", tc.method, tc.target, specPath, err)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		// The token itself is the handler's business; the spec only says
		// which operations take one (see TestSpecSecurity).
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	switch err := openapi3filter.ValidateRequest(ctx, in); {
	case tc.offSpec && err == nil:
		t.Errorf("the request is meant to break the spec, but the spec accepts it")
	case !tc.offSpec && err != nil:
		t.Errorf("the request breaks the spec: %v", err)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	out.SetBodyBytes(rec.Body.Bytes())
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("the %d response breaks the spec: %v\nbody: %s", rec.Code, err, rec.Body)
	}
	s.mu.Lock()
	s.covered[fmt.Sprintf("%s %s %d", route.Method, route.Path, rec.Code)] = true
	s.mu.Unlock()
	return rec
}

// TestHandlersMatchOpenAPI holds the handlers and api/openapi.yaml to each
// other: every request below, and the handler's answer, must validate
// against the spec, and every operation and every status the spec lists
// must be exercised here.
func TestHandlersMatchOpenAPI(t *testing.T) {
	s := loadSpec(t)
	auth := []string{"Authorization", "Bearer " + testToken}
	post := append(slices.Clone(auth), "Content-Type", jsonCT)
	const good = `{"preset":"e4","scale":0.1,"backing":"file"}`
	internal := func(o *Options) { o.Runs.(*fakeRuns).err = errors.New("store: disk on fire") }
	noRuns := func(o *Options) { o.Runs = nil }
	cases := []specCase{
		{name: "live page", method: "GET", target: "/", wantCode: 200},
		{name: "metrics", method: "GET", target: "/metrics", wantCode: 200},
		{name: "healthz", method: "GET", target: "/healthz", wantCode: 200},
		{name: "readyz", method: "GET", target: "/readyz", wantCode: 200},
		{name: "readyz before the first sample", method: "GET", target: "/readyz", opts: func(o *Options) { o.Ready = func() error { return errors.New("no sample taken yet") } }, wantCode: 503, wantErr: "no sample taken yet"},
		{name: "presets", method: "GET", target: "/api/v1/presets", wantCode: 200},
		{name: "presets without runs", method: "GET", target: "/api/v1/presets", opts: noRuns, wantCode: 200},

		{name: "good spec", method: "POST", target: "/api/v1/runs", body: good, header: post, wantCode: 201},
		{name: "every field", method: "POST", target: "/api/v1/runs", header: post, wantCode: 201,
			body: `{"preset":"e1","consumers":4,"size_bytes":2000000,"writes_per_cycle":500,"sleep":"50ms","interval":"1m30s","lead_in":"0s","memory_limit_bytes":33554432,"scale":1,"backing":"file","fill":"zero"}`},
		{name: "fill preset", method: "POST", target: "/api/v1/runs", body: `{"preset":"fill","scale":0.05,"repeats":2,"memory_limit_bytes":2147483648}`, header: post, wantCode: 201},
		{name: "bad field", method: "POST", target: "/api/v1/runs", body: `{"preset":"e4","consumers":0}`, header: post, wantCode: 400, wantErr: "consumers: ", offSpec: true},
		{name: "bad enum", method: "POST", target: "/api/v1/runs", body: `{"preset":"e4","backing":"tape"}`, header: post, wantCode: 400, wantErr: "backing: ", offSpec: true},
		{name: "bad duration", method: "POST", target: "/api/v1/runs", body: `{"preset":"e4","sleep":"-1s"}`, header: post, wantCode: 400, wantErr: "sleep: ", offSpec: true},
		{name: "wrong type", method: "POST", target: "/api/v1/runs", body: `{"preset":"e4","scale":"big"}`, header: post, wantCode: 400, wantErr: "scale: ", offSpec: true},
		{name: "unknown field", method: "POST", target: "/api/v1/runs", body: `{"preset":"e4","cosumers":3}`, header: post, wantCode: 400, wantErr: "cosumers: unknown field", offSpec: true},
		{name: "unknown preset", method: "POST", target: "/api/v1/runs", body: `{"preset":"e5"}`, header: post, wantCode: 400, wantErr: "preset: ", offSpec: true},
		{name: "empty body", method: "POST", target: "/api/v1/runs", header: post, wantCode: 400, wantErr: "body: a JSON run spec is required", offSpec: true},
		// Bounds that depend on scale or preset only the observer can check.
		{name: "too small after scale", method: "POST", target: "/api/v1/runs", body: `{"preset":"e4","size_bytes":2000000,"scale":0.1}`, header: post, wantCode: 400, wantErr: "size_bytes: "},
		{name: "repeats outside fill", method: "POST", target: "/api/v1/runs", body: `{"preset":"e4","repeats":2}`, header: post, wantCode: 400, wantErr: "repeats: "},
		{name: "busy", method: "POST", target: "/api/v1/runs", body: good, header: post, opts: func(o *Options) { o.Runs = newFakeRuns(true) }, wantCode: 409, wantErr: "run run-2 is pending: another run is active"},
		{name: "unsafe", method: "POST", target: "/api/v1/runs", body: `{"preset":"e4","scale":0.1}`, header: post, wantCode: 422, wantErr: "no swap configured"},
		{name: "no token", method: "POST", target: "/api/v1/runs", body: good, header: []string{"Content-Type", jsonCT}, wantCode: 401, wantErr: "authorization required"},
		{name: "wrong token", method: "POST", target: "/api/v1/runs", body: good, header: []string{"Content-Type", jsonCT, "Authorization", "Bearer " + wrongToken}, wantCode: 401, wantErr: "Authorization: the bearer token is wrong"},
		{name: "oversize", method: "POST", target: "/api/v1/runs", body: `{"preset":"e4",` + strings.Repeat(" ", maxBodyBytes) + `"scale":0.1}`, header: post, wantCode: 413, wantErr: "body: larger than the 65536-byte (64 KiB) limit"},
		{name: "wrong content type", method: "POST", target: "/api/v1/runs", body: good, header: append(slices.Clone(auth), "Content-Type", "text/plain"), wantCode: 415, wantErr: `Content-Type "text/plain": a run spec is JSON; set Content-Type: application/json`, offSpec: true},
		{name: "start failing", method: "POST", target: "/api/v1/runs", body: good, header: post, opts: internal, wantCode: 500, wantErr: "internal error; the observer's log has the cause under ref="},
		{name: "start without runs", method: "POST", target: "/api/v1/runs", body: good, header: post, opts: noRuns, wantCode: 503, wantErr: "runs are not enabled"},
		{name: "disk full", method: "POST", target: "/api/v1/runs", body: good, header: post, wantCode: 507, wantErr: "the run record cannot be written to the data directory (no space left on device)",
			opts: func(o *Options) {
				o.Runs.(*fakeRuns).err = fmt.Errorf("%w (no space left on device): free space there", run.ErrNoStorage)
			}},
		{name: "cross-origin start", method: "POST", target: "/api/v1/runs", body: good, header: append(slices.Clone(post), "Sec-Fetch-Site", "cross-site"), wantCode: 403, wantErr: "a cross-origin POST is refused"},

		{name: "list", method: "GET", target: "/api/v1/runs", opts: func(o *Options) { o.Runs = newFakeRuns(true) }, wantCode: 200},
		{name: "list a page", method: "GET", target: "/api/v1/runs?page_size=1", opts: func(o *Options) { o.Runs = newFakeRuns(true) }, wantCode: 200},
		{name: "list the next page", method: "GET", target: "/api/v1/runs?page_size=1&page_token=run-2", opts: func(o *Options) { o.Runs = newFakeRuns(true) }, wantCode: 200},
		{name: "list a page too big", method: "GET", target: "/api/v1/runs?page_size=501", wantCode: 400, wantErr: "page_size: \"501\": want 1 to 500", offSpec: true},
		{name: "list a bad token", method: "GET", target: "/api/v1/runs?page_token=../x", wantCode: 400, wantErr: "page_token: ", offSpec: true},
		{name: "list an unknown parameter", method: "GET", target: "/api/v1/runs?limit=5", wantCode: 400, wantErr: "limit: unknown query parameter"},
		{name: "list failing", method: "GET", target: "/api/v1/runs", opts: internal, wantCode: 500, wantErr: "internal error; the observer's log has the cause under ref="},
		{name: "list without runs", method: "GET", target: "/api/v1/runs", opts: noRuns, wantCode: 503, wantErr: "runs are not enabled"},

		{name: "get", method: "GET", target: "/api/v1/runs/run-1", wantCode: 200},
		{name: "get pending", method: "GET", target: "/api/v1/runs/run-2", opts: func(o *Options) { o.Runs = newFakeRuns(true) }, wantCode: 200},
		{name: "get missing", method: "GET", target: "/api/v1/runs/run-9", wantCode: 404, wantErr: "run run-9: no such run"},
		{name: "get bad id", method: "GET", target: "/api/v1/runs/Run_1", wantCode: 400, wantErr: "id: ", offSpec: true},
		{name: "get failing", method: "GET", target: "/api/v1/runs/run-1", opts: internal, wantCode: 500, wantErr: "internal error; the observer's log has the cause under ref="},
		{name: "get without runs", method: "GET", target: "/api/v1/runs/run-1", opts: noRuns, wantCode: 503, wantErr: "runs are not enabled"},

		{name: "delete twice", method: "DELETE", target: "/api/v1/runs/run-2", header: auth, opts: func(o *Options) { o.Runs = newFakeRuns(true) }, times: 2, wantCode: 200},
		{name: "delete finished", method: "DELETE", target: "/api/v1/runs/run-1", header: auth, wantCode: 200},
		{name: "delete missing", method: "DELETE", target: "/api/v1/runs/run-9", header: auth, wantCode: 404, wantErr: "run run-9: no such run"},
		{name: "delete bad id", method: "DELETE", target: "/api/v1/runs/Run_1", header: auth, wantCode: 400, wantErr: "id: ", offSpec: true},
		{name: "delete without a token", method: "DELETE", target: "/api/v1/runs/run-1", wantCode: 401, wantErr: "authorization required"},
		{name: "delete failing", method: "DELETE", target: "/api/v1/runs/run-1", header: auth, opts: internal, wantCode: 500, wantErr: "internal error; the observer's log has the cause under ref="},
		{name: "cross-origin delete", method: "DELETE", target: "/api/v1/runs/run-1", header: append(slices.Clone(auth), "Origin", "https://attacker.example"), wantCode: 403, wantErr: "a cross-origin DELETE is refused"},
		{name: "delete without runs", method: "DELETE", target: "/api/v1/runs/run-1", header: auth, opts: noRuns, wantCode: 503, wantErr: "runs are not enabled"},

		{name: "diagnoses", method: "GET", target: "/api/v1/diagnoses", opts: func(o *Options) { o.Diagnoses = newFakeDiagnoses() }, wantCode: 200},
		{name: "no diagnoses yet", method: "GET", target: "/api/v1/diagnoses", opts: func(o *Options) { o.Diagnoses = fakeDiagnoses{} }, wantCode: 200},
		{name: "diagnoses not made", method: "GET", target: "/api/v1/diagnoses", wantCode: 503, wantErr: "diagnoses are not made here"},

		{name: "samples", method: "GET", target: "/api/v1/runs/run-1/samples.csv", wantCode: 200},
		{name: "samples missing", method: "GET", target: "/api/v1/runs/run-9/samples.csv", wantCode: 404, wantErr: "run run-9: no such run"},
		{name: "samples bad id", method: "GET", target: "/api/v1/runs/RUN/samples.csv", wantCode: 400, wantErr: "id: ", offSpec: true},
		{name: "samples failing", method: "GET", target: "/api/v1/runs/run-1/samples.csv", opts: internal, wantCode: 500, wantErr: "internal error; the observer's log has the cause under ref="},
		{name: "samples without runs", method: "GET", target: "/api/v1/runs/run-1/samples.csv", opts: noRuns, wantCode: 503, wantErr: "runs are not enabled"},
	}
	// Without a token, every operation refuses a Host that is not the
	// observer's (DNS rebinding).
	rebound := func(o *Options) { o.Token, o.ListenHosts = "", []string{"127.0.0.1"} }
	for path, item := range s.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if _, ok := op.Responses.Map()["421"]; !ok {
				continue
			}
			tc := specCase{name: "rebound " + method + " " + path, method: method, target: "http://rebind.attacker.example" + strings.ReplaceAll(path, "{id}", "run-1"),
				opts: rebound, wantCode: 421, wantErr: `Host "rebind.attacker.example" is not an address of this observer`}
			if method == http.MethodPost {
				tc.body, tc.header = good, []string{"Content-Type", jsonCT}
			}
			cases = append(cases, tc)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Gatherer: prometheus.ToTransactionalGatherer(prometheus.NewRegistry()), Ready: func() error { return nil }, Runs: newFakeRuns(false), Token: testToken, Page: livePage()}
			if tc.opts != nil {
				tc.opts(&opts)
			}
			h := NewHandler(opts)
			var first string
			for i := range max(tc.times, 1) {
				rec := s.exchange(t, h, tc)
				if rec.Code != tc.wantCode {
					t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.target, rec.Code, rec.Body, tc.wantCode)
				}
				if tc.wantErr != "" {
					if msg := errorOf(t, rec); !strings.HasPrefix(msg, tc.wantErr) {
						t.Errorf("error %q, want it to start with %q", msg, tc.wantErr)
					}
				}
				if i == 0 {
					first = rec.Body.String()
				} else if rec.Body.String() != first {
					t.Errorf("request %d answered differently:\n%s\nthen\n%s", i+1, first, rec.Body)
				}
			}
		})
	}

	t.Run("metrics at the in-flight limit", func(t *testing.T) {
		s.metricsInFlightLimit(t)
	})

	// Every operation and every status the spec lists was exercised above,
	// so neither side can grow alone.
	for path, item := range s.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				if key := method + " " + path + " " + status; !s.covered[key] {
					t.Errorf("%s: %s in %s is never exercised", key, op.OperationID, specPath)
				}
			}
		}
	}
}

// blockingCollector holds every scrape until release is closed.
type blockingCollector struct {
	entered chan struct{}
	release chan struct{}
}

func (c *blockingCollector) Describe(chan<- *prometheus.Desc) {}

func (c *blockingCollector) Collect(chan<- prometheus.Metric) {
	c.entered <- struct{}{}
	<-c.release
}

// metricsInFlightLimit fills /metrics' 4 scrape slots, so a fifth gets 503.
func (s *specChecker) metricsInFlightLimit(t *testing.T) {
	c := &blockingCollector{entered: make(chan struct{}), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	h := NewHandler(Options{Gatherer: prometheus.ToTransactionalGatherer(reg), Ready: func() error { return nil }})
	scrape := specCase{method: "GET", target: "/metrics"}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), s.request(scrape)) })
		<-c.entered
	}
	rec := s.exchange(t, h, scrape)
	close(c.release)
	wg.Wait()
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("a fifth concurrent scrape: %d %s, want 503", rec.Code, rec.Body)
	}
}

// TestSpecSecurity checks the spec asks for the bearer token exactly where
// the handler does: on POST and DELETE.
func TestSpecSecurity(t *testing.T) {
	s := loadSpec(t)
	if len(s.doc.Security) != 0 {
		t.Errorf("the spec has a global security requirement %v; put it on the mutating operations", s.doc.Security)
	}
	for path, item := range s.doc.Paths.Map() {
		for method, op := range item.Operations() {
			mutating := method == http.MethodPost || method == http.MethodDelete
			var bearer bool
			if op.Security != nil {
				for _, req := range *op.Security {
					_, bearer = req["bearer"]
				}
			}
			if bearer != mutating {
				t.Errorf("%s %s: bearer security %v, want %v", method, path, bearer, mutating)
			}
			if _, has401 := op.Responses.Map()["401"]; has401 != mutating {
				t.Errorf("%s %s: documents 401 %v, want %v", method, path, has401, mutating)
			}
		}
	}
}

// TestSpecSchemasMatchTypes checks each schema has exactly the JSON fields
// of its Go type, and requires exactly those always sent, so a field added
// to loadgen shows up here before a client trips on it.
func TestSpecSchemasMatchTypes(t *testing.T) {
	s := loadSpec(t)
	for name, typ := range map[string]reflect.Type{
		"RunSpec":           reflect.TypeFor[run.Spec](),
		"ResolvedSpec":      reflect.TypeFor[run.Resolved](),
		"Preset":            reflect.TypeFor[run.Preset](),
		"Record":            reflect.TypeFor[run.Record](),
		"ConsumerRecord":    reflect.TypeFor[run.ConsumerRecord](),
		"Transition":        reflect.TypeFor[run.Transition](),
		"Diagnosis":         reflect.TypeFor[diagnosis.Diagnosis](),
		"DiagnosisEvidence": reflect.TypeFor[diagnosis.Evidence](),
		"Limit":             reflect.TypeFor[diagnosis.Limit](),
		"Demand":            reflect.TypeFor[diagnosis.Demand](),
		"Shortfall":         reflect.TypeFor[diagnosis.Shortfall](),
		"Culprit":           reflect.TypeFor[diagnosis.Culprit](),
		"Remedy":            reflect.TypeFor[diagnosis.Remedy](),
	} {
		ref := s.doc.Components.Schemas[name]
		if ref == nil || ref.Value == nil {
			t.Errorf("%s: no such schema in %s", name, specPath)
			continue
		}
		var fields, required []string
		for f := range typ.Fields() {
			tag, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if tag == "-" || !f.IsExported() {
				continue // never sent
			}
			fields = append(fields, tag)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, tag)
			}
		}
		var props []string
		for p := range ref.Value.Properties {
			props = append(props, p)
		}
		slices.Sort(fields)
		slices.Sort(props)
		if !slices.Equal(fields, props) {
			t.Errorf("%s: schema properties %v, %s has %v", name, props, typ, fields)
		}
		slices.Sort(required)
		want := slices.Sorted(slices.Values(ref.Value.Required))
		if !slices.Equal(required, want) {
			t.Errorf("%s: schema requires %v, %s always sends %v", name, want, typ, required)
		}
	}
}

// TestEnumsFollowTheRegistries holds the spec's lists of presets and
// policies to what the registries hold, so a preset or policy added in
// its own file is refused here until the API says it too.
func TestEnumsFollowTheRegistries(t *testing.T) {
	s := loadSpec(t)
	enum := func(sc *openapi3.Schema) []string {
		var out []string
		for _, v := range sc.Enum {
			out = append(out, fmt.Sprint(v))
		}
		return out
	}
	if p := s.doc.Components.Schemas["PresetName"]; p == nil || !slices.Equal(enum(p.Value), run.PresetNames()) {
		t.Errorf("PresetName's enum is not the registry's %v", run.PresetNames())
	}
	found := 0
	for name, sc := range s.doc.Components.Schemas {
		if prop := sc.Value.Properties["policy"]; prop != nil && prop.Value != nil {
			found++
			if got := enum(prop.Value); !slices.Equal(got, policy.Names()) {
				t.Errorf("%s.policy's enum %v, want the registry's %v", name, got, policy.Names())
			}
		}
	}
	if found < 2 {
		t.Errorf("%d schemas have a policy, want the spec's and the record's", found)
	}
	set := s.doc.Components.Schemas["Settings"]
	if set == nil {
		t.Fatal("no Settings schema")
	}
	got := slices.Sorted(maps.Keys(set.Value.Properties))
	if want := slices.Sorted(slices.Values(settings.Names())); !slices.Equal(got, want) {
		t.Errorf("Settings' properties %v, want the registry's %v", got, want)
	}
}
