package vmtest

import (
	"bufio"
	"encoding/json"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/thrashscope/thrashscope/internal/testenv"
)

// Plan is what the guest's init does once it has mounted the kernel's file
// systems: load the modules, make the swap, then run each step.
type Plan struct {
	// Modules are the module files to load, in order, as paths in the
	// guest; .ko.xz ones are decompressed by the kernel.
	Modules []string `json:"modules"`
	// SwapDevice is the disk made swap; "" runs without.
	SwapDevice string `json:"swap_device"`
	// DataDevice is an ext4 disk mounted at /var/tmp, where tests keep
	// files whose page cache they fault on: a real file system, not tmpfs.
	DataDevice string   `json:"data_device"`
	Env        []string `json:"env"`
	// Seed is credited to the guest's random pool at boot: a TCG guest
	// without RDRAND or a virtio-rng would block getrandom for minutes.
	Seed  []byte `json:"seed"`
	Steps []Step `json:"steps"`
}

// Step is one program the guest runs.
type Step struct {
	Name string   `json:"name"`
	Path string   `json:"path"`
	Args []string `json:"args"`
	Dir  string   `json:"dir"`
	// TimeoutSeconds bounds the step; its process is killed after it.
	TimeoutSeconds int `json:"timeout_seconds"`
	// GoTest: the program is a Go test binary run with -test.v, and each
	// test is reported.
	GoTest bool `json:"go_test"`
}

// Where the plan and thrashscope's files go in the guest.
const (
	GuestPlan = "/thrashscope/plan.json"
	GuestBin  = "/thrashscope/bin"
	GuestSrc  = "/thrashscope/src"
)

// GuestReportPort is the guest's second serial port, which carries the
// reports alone (Machine.Boot gives it to qemu as a file).
const GuestReportPort = "/dev/ttyS1"

// ReportPrefix starts each line of the console that is a Report.
const ReportPrefix = "THRASHSCOPE-VMTEST "

// Report is what the guest says of its boot, of each step, and when done.
type Report struct {
	Kind string `json:"kind"` // boot, step or done
	// Boot: the kernel as it runs, and what it could not set up.
	Uname    string   `json:"uname,omitempty"`
	Clock    string   `json:"clock,omitempty"` // the clock source: timings under TCG depend on it
	Problems []string `json:"problems,omitempty"`
	// Step: its name, whether it passed, its tests, and the tail of its
	// output.
	Step    string       `json:"step,omitempty"`
	Pass    bool         `json:"pass"`
	Seconds float64      `json:"seconds"`
	Tests   []TestResult `json:"tests,omitempty"`
	Figures []Figure     `json:"figures,omitempty"`
	Output  string       `json:"output,omitempty"`
}

// Figure is one figure a test measured and logged with testenv.Figure.
type Figure struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// TestResult is one Go test of a step.
type TestResult struct {
	Name string `json:"name"`
	// Result is PASS, FAIL, SKIP, or NotApplicable for a test that
	// skipped through testenv.NotApplicable.
	Result  string  `json:"result"`
	Seconds float64 `json:"seconds"`
	// Why is a failed test's last log lines ("x_test.go:12: ..."), so
	// the host can name the cause without the console log.
	Why string `json:"why,omitempty"`
	// NotApplicable are its subtests that did not apply to the kernel,
	// each "name: why": a parent that passed has not covered them.
	NotApplicable []string `json:"not_applicable,omitempty"`
}

// Line encodes a report as a console line.
func (r Report) Line() string {
	b, _ := json.Marshal(r)
	return ReportPrefix + string(b)
}

// ParseReports reads the reports off a console's output; other lines are
// the kernel's and the steps' own.
func ParseReports(r io.Reader) []Report {
	var out []Report
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		// A report starts its line; a step's own output is prefixed, so
		// none it prints can pass for one.
		line, ok := strings.CutPrefix(strings.TrimLeft(sc.Text(), "\r"), ReportPrefix)
		if !ok {
			continue
		}
		var rep Report
		if json.Unmarshal([]byte(line), &rep) == nil {
			out = append(out, rep)
		}
	}
	return out
}

var (
	testLine = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)
	// testStart names the test whose output follows: go test -v prints
	// it when a test starts, resumes, or takes the output over.
	testStart = regexp.MustCompile(`^=== (?:RUN|CONT|NAME) +(\S+)`)
	// subtestFailed is a failed subtest's result, indented under its
	// parent's.
	subtestFailed = regexp.MustCompile(`^\s+--- FAIL: (\S+) \(`)
	// subtestSkipped is a skipped subtest's result.
	subtestSkipped = regexp.MustCompile(`^\s+--- SKIP: (\S+) \(`)
	// logLine is a t.Log, t.Error or t.Fatal line, indented by go test.
	logLine = regexp.MustCompile(`^\s+(\S+_test\.go:\d+: .*)`)
)

// NotApplicable is the result of a test that does not apply to the
// kernel (testenv.NotApplicable); its Why says why.
const NotApplicable = "N/A"

// whyLines and whyBytes bound a failed test's Why.
const (
	whyLines = 3
	whyBytes = 600
)

// GoTests reads the top-level results of go test -test.v output, a failed
// test's last log lines with it: those of the subtests that failed and
// have no failed subtest of their own, so that a later subtest that passed
// does not hide why an earlier one failed.
func GoTests(output string) []TestResult {
	var out []TestResult
	logs := map[string][]string{}        // each test's and subtest's last log lines
	notApplicable := map[string]string{} // why, by test or subtest
	var failed []string                  // subtests that failed, in order
	subNA := map[string][]string{}       // subtests not applicable, by top-level test
	current := ""
	for line := range strings.Lines(output) {
		line = strings.TrimRight(line, "\r\n")
		if m := testStart.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if m := logLine.FindStringSubmatch(line); m != nil && current != "" {
			if _, why, ok := strings.Cut(m[1], testenv.NotApplicableMark); ok {
				notApplicable[current] = why
			}
			if l := logs[current]; len(l) == whyLines {
				logs[current] = append(l[1:], m[1])
			} else {
				logs[current] = append(l, m[1])
			}
			continue
		}
		if m := subtestFailed.FindStringSubmatch(line); m != nil {
			failed = append(failed, m[1])
			continue
		}
		if m := subtestSkipped.FindStringSubmatch(line); m != nil {
			if why, ok := notApplicable[m[1]]; ok {
				top, sub, _ := strings.Cut(m[1], "/")
				subNA[top] = append(subNA[top], sub+": "+why)
			}
			continue
		}
		m := testLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		secs, _ := strconv.ParseFloat(m[3], 64)
		r := TestResult{Name: m[2], Result: m[1], Seconds: secs}
		if why, ok := notApplicable[r.Name]; ok && r.Result == "SKIP" {
			r.Result, r.Why = NotApplicable, why
		}
		out = append(out, r)
	}
	// go test prints a parent's result before its subtests': a failed
	// test's why waits for the whole output.
	for i, r := range out {
		if r.Result == "FAIL" {
			out[i].Why = failedWhy(r.Name, failed, logs)
		}
		out[i].NotApplicable = subNA[r.Name]
	}
	return out
}

// failedWhy is the last log lines of the failed leaves under a failed
// top-level test (each prefixed by its subtest's name), or its own where
// no subtest failed, its end kept within whyBytes.
func failedWhy(top string, failed []string, logs map[string][]string) string {
	var parts []string
	for _, name := range failed {
		if !strings.HasPrefix(name, top+"/") || slices.ContainsFunc(failed, func(f string) bool { return strings.HasPrefix(f, name+"/") }) {
			continue
		}
		if l := logs[name]; len(l) > 0 {
			parts = append(parts, strings.TrimPrefix(name, top+"/")+": "+strings.Join(l, " / "))
		}
	}
	if len(parts) == 0 {
		parts = []string{strings.Join(logs[top], " / ")}
	}
	// The last line is the likeliest cause: a long why keeps its end.
	why := strings.Join(parts, " // ")
	if len(why) > whyBytes {
		why = "…" + strings.ToValidUTF8(why[len(why)-whyBytes:], "")
	}
	return why
}

// Figures reads the figures the tests logged (testenv.Figure) from go test
// -test.v output, the last of each name kept (a test retried logs again).
func Figures(output string) []Figure {
	var out []Figure
	for line := range strings.Lines(output) {
		_, rest, ok := strings.Cut(line, testenv.FigureMark)
		if !ok {
			continue
		}
		name, value, ok := strings.Cut(strings.TrimSpace(rest), ": ")
		if !ok {
			continue
		}
		f := Figure{Name: name, Value: value}
		if i := slices.IndexFunc(out, func(g Figure) bool { return g.Name == name }); i >= 0 {
			out[i] = f
		} else {
			out = append(out, f)
		}
	}
	return out
}
