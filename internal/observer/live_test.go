package observer

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/testenv"
)

// browser starts headless Chromium for one test and returns a tab on it,
// bounded by timeout. The browser goes when the test ends.
func browser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	path := testenv.RequireTool(t, "chromium", "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

// eval runs a script in the page and decodes its value.
func eval[T any](t *testing.T, ctx context.Context, script string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](script))
	if err != nil {
		t.Fatalf("evaluating %s: %v", script, err)
	}
	return v
}

// poll waits until a script's value is truthy in the page.
func poll(t *testing.T, ctx context.Context, what, script string, timeout time.Duration) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[any](script, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout))); err != nil {
		t.Fatalf("waiting %s for %s (%s): %v", timeout, what, script, err)
	}
}

func do(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// click clicks the element with the given id like a user. The page swaps
// its live parts every refresh, so the node found may be replaced before
// the click lands; a user would click the new one, and so does click.
func click(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	var err error
	for range 3 {
		if err = chromedp.Do(ctx, chromedp.Click(chromedp.ID(id))); err == nil || !strings.Contains(err.Error(), "Could not find node") {
			break
		}
	}
	if err != nil {
		t.Fatalf("clicking #%s: %v", id, err)
	}
}

// message is the page's run message: the API's error verbatim on a 4xx.
func message(t *testing.T, ctx context.Context) (code, text string) {
	t.Helper()
	m := eval[map[string]string](t, ctx, `(() => {
		const m = document.getElementById('run-message');
		const c = m.querySelector('.code');
		return {code: c ? c.textContent : '', text: c ? m.textContent.slice(c.textContent.length) : m.textContent};
	})()`)
	return m["code"], m["text"]
}

// svgPaths counts an SVG figure's paths, and its curves among them (the
// paths clipped to the data area, the dashed reference line not counted).
func svgPaths(t *testing.T, url string) (paths, curves int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/svg+xml" {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	d := xml.NewDecoder(resp.Body)
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return paths, curves
		}
		if err != nil {
			t.Fatalf("%s is not well-formed SVG: %v", url, err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Local != "path" {
			continue
		}
		paths++
		clipped, dashed := false, false
		for _, a := range se.Attr {
			clipped = clipped || a.Name.Local == "clip-path"
			dashed = dashed || a.Name.Local == "stroke-dasharray"
		}
		if clipped && !dashed {
			curves++
		}
	}
}

// screenshot saves a full-page PNG as a test artifact.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv(testenv.ArtifactsEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d KiB)", path, len(png)>>10)
}

const figuresLoaded = `(() => {
	const imgs = [...document.querySelectorAll('img.figure')];
	return imgs.length === 4 && imgs.every(i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0) &&
		imgs.map(i => i.naturalWidth + 'x' + i.naturalHeight);
})()`

// TestLivePageInBrowser drives the live page in headless Chromium against
// the real observer: the figures load and draw, the top thrashers show, a
// run started from the form runs, a second is refused with the API's 409
// message, and the abort button ends the run leaving nothing behind.
func TestLivePageInBrowser(t *testing.T) {
	testenv.RequirePrivileged(t)
	testenv.RequireSwap(t)
	d := startDaemon(t, t.TempDir()) // first: it may build the binaries
	ctx := browser(t, 60*time.Second)

	// Major faults of this very process, so the table has a row before
	// any run; and two samples, so the figures have curves.
	takeFileFaults(t, 4000)
	waitFor(t, 10*time.Second, "the figures to draw", func() bool { paths, _ := svgPaths(t, d.url+"/live/figures/cpu.svg"); return paths > 0 })

	do(t, ctx, chromedp.Navigate(d.url+"/"))
	poll(t, ctx, "the four figures to load", figuresLoaded, 10*time.Second)
	sizes := eval[[]string](t, ctx, figuresLoaded)
	t.Logf("figures' natural sizes: %v", sizes)
	for _, name := range []string{"cpu", "paging", "pressure", "detector"} {
		if paths, curves := svgPaths(t, d.url+"/live/figures/"+name+".svg"); curves < 1 || paths < 3+curves {
			t.Errorf("%s.svg draws %d paths of which %d curves, want axes, grid, ticks and a curve at least", name, paths, curves)
		}
	}
	if state := eval[string](t, ctx, `document.getElementById('state').textContent`); state != "normal" && state != "monitoring" && state != "thrashing" {
		t.Errorf("detector state %q", state)
	}
	poll(t, ctx, "the top-thrashers table to list this test", `[...document.querySelectorAll('#top-table tbody tr')].some(r => r.cells[0].textContent === '`+fmt.Sprint(os.Getpid())+`')`, 10*time.Second)
	poll(t, ctx, "the presets from the API", `[...document.querySelectorAll('#preset option')].map(o => o.value).join() === '`+strings.Join(run.PresetNames(), ",")+`'`, 5*time.Second)

	// Start e4 at a twentieth from the form: 25 × 5 MB in 50 MiB.
	do(t, ctx,
		chromedp.SetValue(chromedp.ID("preset"), "e4"),
		chromedp.SetValue(chromedp.ID("scale"), "0.05"),
	)
	click(t, ctx, "start")
	poll(t, ctx, "the page to say the run started", `document.getElementById('run-message').textContent.includes('started')`, 10*time.Second)
	code, b := d.do(t, "GET", "/api/v1/runs", "")
	var list struct{ Runs []run.Record }
	if err := json.Unmarshal(b, &list); code != http.StatusOK || err != nil || len(list.Runs) != 1 {
		t.Fatalf("GET /api/v1/runs after the form: %d %s", code, b)
	}
	rec := list.Runs[0]
	scale := 0.05
	want, err := run.Resolve(run.Spec{Preset: "e4", Scale: &scale})
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != run.StateRunning || !reflect.DeepEqual(rec.Spec, want) {
		t.Fatalf("the form started %s %+v, want running %+v", rec.State, rec.Spec, want)
	}
	poll(t, ctx, "the page to show the run", `document.getElementById('run-id')?.textContent === '`+rec.ID+`' && document.getElementById('run-state').textContent === 'running'`, 5*time.Second)

	// A second start is refused; the page shows the API's message as sent.
	click(t, ctx, "start")
	poll(t, ctx, "the 409", `document.querySelector('#run-message .code')?.textContent === '409'`, 5*time.Second)
	code, b = d.do(t, "POST", "/api/v1/runs", `{"preset":"e4","scale":0.05}`)
	var apiErr struct{ Error string }
	_ = json.Unmarshal(b, &apiErr)
	if c, text := message(t, ctx); c != "409" || text != apiErr.Error || code != http.StatusConflict {
		t.Errorf("page shows %s %q; the API says %d %q", c, text, code, apiErr.Error)
	}

	// Consumers come after the 10 s lead-in; they are pinned in the table.
	waitFor(t, 20*time.Second, "three consumers", func() bool { return started(d.record(t, rec.ID)) >= 3 })
	poll(t, ctx, "consumers in the table", `[...document.querySelectorAll('#top-table tbody tr')].some(r => r.cells[1].textContent.startsWith('consumer-'))`, 5*time.Second)
	poll(t, ctx, "the run's progress", `/consumers [1-9]\d* holding memory/.test(document.getElementById('run-progress')?.textContent)`, 5*time.Second)
	screenshot(t, ctx, "live-page.png")

	pids := pidsOf(d.record(t, rec.ID))
	click(t, ctx, "abort")
	poll(t, ctx, "the page to say aborted", `document.getElementById('run-message').textContent === 'run `+rec.ID+` aborted'`, 15*time.Second)
	final := d.record(t, rec.ID)
	if final.State != run.StateAborted {
		t.Errorf("after the page's abort: %s %q", final.State, final.Reason)
	}
	waitFor(t, 5*time.Second, "consumers and cgroup gone", func() bool { return len(alive(pids)) == 0 && gone(rec.Cgroup) })
	poll(t, ctx, "the page to show it aborted", `document.getElementById('run-state')?.textContent === 'aborted' && !document.getElementById('abort')`, 5*time.Second)
}

// TestLivePageToken: with a token configured the form has a token field;
// without the token the API's 401 shows on the page; with it the request
// passes the check (here to a 422 this host refuses), and the token
// survives a reload in sessionStorage.
func TestLivePageToken(t *testing.T) {
	testenv.RequirePrivileged(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, filepath.Join(dir, "data"), "--web.api-token-file="+token)
	ctx := browser(t, 30*time.Second)
	apiError := func(auth, spec string) (int, string) {
		req, _ := http.NewRequest("POST", d.url+"/api/v1/runs", strings.NewReader(spec))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error
	}

	logged, _ := os.ReadFile(d.log.Name())
	if want := `msg="live page" url=` + d.url + "/"; !strings.Contains(string(logged), want) {
		t.Errorf("the observer's log lacks %s:\n%s", want, logged)
	}

	do(t, ctx, chromedp.Navigate(d.url+"/"), chromedp.WaitVisible(chromedp.ID("token")))
	do(t, ctx, chromedp.SetValue(chromedp.ID("scale"), "1"), chromedp.Click(chromedp.ID("start")))
	poll(t, ctx, "the 401", `document.querySelector('#run-message .code')?.textContent === '401'`, 5*time.Second)
	_, want := apiError("", `{"preset":"e4","scale":1}`)
	if c, text := message(t, ctx); c != "401" || text != want || !strings.HasPrefix(text, "authorization required") {
		t.Errorf("without a token the page shows %s %q, want 401 %q", c, text, want)
	}

	// 1 TiB is past any limit this host can give: a 422 after the token
	// check, the same for every host.
	do(t, ctx,
		chromedp.SendKeys(chromedp.ID("token"), "s3cret"),
		chromedp.SetValue(chromedp.ID("memory-limit"), "1048576"),
		chromedp.Click(chromedp.ID("start")),
	)
	poll(t, ctx, "the 422", `document.querySelector('#run-message .code')?.textContent === '422'`, 5*time.Second)
	code, want := apiError("Bearer s3cret", `{"preset":"e4","scale":1,"memory_limit_bytes":1099511627776}`)
	// The message quotes MemAvailable, which moves between two requests.
	numbers := regexp.MustCompile(`[0-9.]+`)
	if c, text := message(t, ctx); c != "422" || numbers.ReplaceAllString(text, "N") != numbers.ReplaceAllString(want, "N") || code != http.StatusUnprocessableEntity || !strings.HasPrefix(text, "memory_limit_bytes 1 TiB is more than this host can give") {
		t.Errorf("with the token the page shows %s %q, want 422 %q", c, text, want)
	}
	if code, b := d.do(t, "GET", "/api/v1/runs", ""); code != http.StatusOK || strings.Contains(string(b), `"id"`) {
		t.Errorf("refused runs left records: %d %s", code, b)
	}

	do(t, ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("token")))
	if v := eval[string](t, ctx, `document.getElementById('token').value`); v != "s3cret" {
		t.Errorf("after a reload the token field holds %q, want it kept from sessionStorage", v)
	}
	if v := eval[string](t, ctx, `localStorage.length + ' ' + document.cookie`); v != "0 " {
		t.Errorf("the token went beyond sessionStorage: %q", v)
	}
}

func TestSchemeOf(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ file, want string }{
		{"", "http"},
		{write("basic.yml", "basic_auth_users:\n  alice: $2y$10$abc\n"), "http"},
		{write("tls.yml", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"), "https"},
		{write("broken.yml", "tls_server_config: [\n"), "http"},
		{filepath.Join(dir, "missing.yml"), "http"},
	} {
		if got := schemeOf(tc.file); got != tc.want {
			t.Errorf("schemeOf(%s) = %s, want %s", tc.file, got, tc.want)
		}
	}
}
