package vmtest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// KernelResult is one kernel's boot and what its guest reported.
type KernelResult struct {
	Kernel
	Image   Image
	Accel   string
	Seconds float64
	Reports []Report
	// Err says why the kernel could not be fetched, booted, or ended
	// before its plan did.
	Err string
	// Host is what the host's CPUs did while the guest ran (its qemu,
	// other processes, the hypervisor's steal), for the text table.
	Host string
}

// Pass reports whether the kernel booted, ran its whole plan, and every
// step passed with no test skipped: under RequireEnv a test that cannot run
// fails, and one that does not apply says so (NotApplicable), so a plain
// skip is a test that bypassed both and proves nothing.
func (r KernelResult) Pass() bool {
	if r.Err != "" {
		return false
	}
	for _, rep := range r.Reports {
		if rep.Kind == "step" && !rep.Pass {
			return false
		}
		for _, t := range rep.Tests {
			if t.Result == "SKIP" {
				return false
			}
		}
	}
	return true
}

// Boot is the guest's boot report.
func (r KernelResult) Boot() (Report, bool) {
	i := slices.IndexFunc(r.Reports, func(rep Report) bool { return rep.Kind == "boot" })
	if i < 0 {
		return Report{}, false
	}
	return r.Reports[i], true
}

// Step is the report of the named step.
func (r KernelResult) Step(name string) (Report, bool) {
	i := slices.IndexFunc(r.Reports, func(rep Report) bool { return rep.Kind == "step" && rep.Step == name })
	if i < 0 {
		return Report{}, false
	}
	return r.Reports[i], true
}

// CheckStep is the name of the step that runs observer --check.
const CheckStep = "check"

// Probe is one line of observer --check's table.
type Probe struct {
	Name, Status, Way, Since, Detail string
	Required                         bool
}

// Probes reads observer --check's table from the check step's output.
func (r KernelResult) Probes() []Probe {
	rep, ok := r.Step(CheckStep)
	if !ok {
		return nil
	}
	var out []Probe
	header, way, since := false, false, false
	for line := range strings.Lines(rep.Output) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "PROBE" && f[1] == "STATUS":
			header, way, since = true, len(f) > 3 && f[3] == "WAY", len(f) > 4 && f[4] == "SINCE"
		case header && len(f) >= 3:
			p := Probe{Name: f[0], Status: f[1], Required: f[2] == "true"}
			rest := f[3:]
			if way && len(rest) > 0 {
				p.Way, rest = rest[0], rest[1:]
			}
			if since && len(rest) > 0 {
				p.Since, rest = rest[0], rest[1:]
			}
			p.Detail = strings.Join(rest, " ")
			out = append(out, p)
		}
	}
	return out
}

// ProbesUp is "n/m (way)": the probes attached of those there are, and
// their programs' way.
func (r KernelResult) ProbesUp() string {
	ps := r.Probes()
	if len(ps) == 0 {
		return "–"
	}
	up, way := 0, ""
	for _, p := range ps {
		if p.Status == "up" {
			up++
			way = p.Way
		}
	}
	if way != "" {
		return fmt.Sprintf("%d/%d (%s)", up, len(ps), way)
	}
	return fmt.Sprintf("%d/%d", up, len(ps))
}

// row is one test of the matrix, by step and test name.
type row struct{ step, test string }

func (r row) String() string {
	if r.test == "" {
		return r.step
	}
	return r.step + ": " + r.test
}

// rows lists every step and test any kernel reported, in plan order.
func rows(results []KernelResult) []row {
	var out []row
	seen := map[row]bool{}
	for _, res := range results {
		for _, rep := range res.Reports {
			if rep.Kind != "step" {
				continue
			}
			add := func(r row) {
				if !seen[r] {
					seen[r] = true
					out = append(out, r)
				}
			}
			if len(rep.Tests) == 0 {
				add(row{step: rep.Step})
			}
			for _, t := range rep.Tests {
				add(row{step: rep.Step, test: t.Name})
			}
		}
	}
	return out
}

// cell is one kernel's result of one row.
func cell(res KernelResult, r row) string {
	rep, ok := res.Step(r.step)
	if !ok {
		return "not run"
	}
	if r.test == "" {
		if rep.Pass {
			return fmt.Sprintf("pass %.0fs", rep.Seconds)
		}
		return fmt.Sprintf("FAIL %.0fs", rep.Seconds)
	}
	i := slices.IndexFunc(rep.Tests, func(t TestResult) bool { return t.Name == r.test })
	if i < 0 {
		return "not run"
	}
	t := rep.Tests[i]
	if t.Result == NotApplicable {
		return "not applicable"
	}
	c := fmt.Sprintf("%s %.0fs", strings.ToLower(t.Result), t.Seconds)
	for _, na := range t.NotApplicable {
		name, _, _ := strings.Cut(na, ":")
		c += "; " + name + " not applicable"
	}
	return c
}

func summary(res KernelResult) []string {
	release, accel := "–", "–"
	if res.Image.Release != "" {
		release = res.Image.Release
	}
	if res.Accel != "" {
		accel = res.Accel
	}
	outcome := "pass"
	if !res.Pass() {
		outcome = "FAIL"
		if res.Err != "" {
			outcome += ": " + res.Err
		}
	}
	return []string{res.Name, release, accel, fmt.Sprintf("%.0fs", res.Seconds), res.ProbesUp(), outcome}
}

// Table is the matrix as text: a line a kernel, then a line a test.
func Table(results []KernelResult) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KERNEL\tRELEASE\tACCEL\tTIME\tPROBES UP\tRESULT\tTHE HOST MEANWHILE")
	for _, res := range results {
		fmt.Fprintln(w, strings.Join(append(summary(res), orDash(res.Host)), "\t"))
	}
	w.Flush()
	b.WriteString("\n")
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	head := []string{"TEST"}
	for _, res := range results {
		head = append(head, res.Name)
	}
	fmt.Fprintln(w, strings.Join(head, "\t"))
	for _, r := range rows(results) {
		line := []string{r.String()}
		for _, res := range results {
			line = append(line, cell(res, r))
		}
		fmt.Fprintln(w, strings.Join(line, "\t"))
	}
	w.Flush()
	if names := figureNames(results); len(names) > 0 {
		b.WriteString("\n")
		w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		head[0] = "MEASURED"
		fmt.Fprintln(w, strings.Join(head, "\t"))
		for _, n := range names {
			line := []string{n}
			for _, res := range results {
				line = append(line, res.Figure(n))
			}
			fmt.Fprintln(w, strings.Join(line, "\t"))
		}
		w.Flush()
	}
	for _, res := range results {
		if boot, ok := res.Boot(); ok && len(boot.Problems) > 0 {
			fmt.Fprintf(&b, "\n%s boot: %s\n", res.Name, strings.Join(boot.Problems, "; "))
		}
	}
	return b.String()
}

// figureNames lists every figure any kernel's tests logged, in plan order.
func figureNames(results []KernelResult) []string {
	var out []string
	for _, res := range results {
		for _, rep := range res.Reports {
			for _, f := range rep.Figures {
				if !slices.Contains(out, f.Name) {
					out = append(out, f.Name)
				}
			}
		}
	}
	return out
}

// Figure is the value the kernel's tests logged under a name, or "–".
func (r KernelResult) Figure(name string) string {
	for _, rep := range r.Reports {
		for _, f := range rep.Figures {
			if f.Name == name {
				return f.Value
			}
		}
	}
	return "–"
}

// Markdown is the matrix as the README's tables: the kernels, each probe's
// status and attach points, the figures measured against the kernel's own,
// and each test's result.
func Markdown(results []KernelResult) string {
	var b strings.Builder
	b.WriteString("| kernel | release | accel | time | probes up | result |\n|---|---|---|---:|---|---|\n")
	for _, res := range results {
		b.WriteString("| " + strings.Join(summary(res), " | ") + " |\n")
	}
	b.WriteString("\n| probe |")
	for _, res := range results {
		b.WriteString(" " + res.Name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(results)) + "\n")
	var names []string
	for _, res := range results {
		for _, p := range res.Probes() {
			if !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
	}
	for _, n := range names {
		b.WriteString("| `" + n + "` |")
		for _, res := range results {
			i := slices.IndexFunc(res.Probes(), func(p Probe) bool { return p.Name == n })
			if i < 0 {
				b.WriteString(" – |")
				continue
			}
			p := res.Probes()[i]
			fmt.Fprintf(&b, " %s: %s |", p.Status, p.Detail)
		}
		b.WriteString("\n")
	}
	if names := figureNames(results); len(names) > 0 {
		b.WriteString("\n| measured |")
		for _, res := range results {
			b.WriteString(" " + res.Name + " |")
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(results)) + "\n")
		for _, n := range names {
			b.WriteString("| " + n + " |")
			for _, res := range results {
				b.WriteString(" " + strings.ReplaceAll(res.Figure(n), "|", "\\|") + " |")
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n| test |")
	for _, res := range results {
		b.WriteString(" " + res.Name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(results)) + "\n")
	for _, r := range rows(results) {
		b.WriteString("| " + r.String() + " |")
		for _, res := range results {
			b.WriteString(" " + cell(res, r) + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// The lines between which Splice puts the tables in a page: the whole
// matrix in docs/kernels.md, its summary in the README.
const (
	MarkdownBegin = "<!-- begin: make test-kernels -->"
	MarkdownEnd   = "<!-- end: make test-kernels -->"
	SummaryBegin  = "<!-- begin: make test-kernels summary -->"
	SummaryEnd    = "<!-- end: make test-kernels summary -->"
)

// Splice replaces what lies between a page's begin and end marker lines
// with the tables; ok is false when the page lacks them.
func Splice(page, begin, end, tables string) (string, bool) {
	i := strings.Index(page, begin+"\n")
	j := strings.Index(page, end)
	if i < 0 || j < i {
		return page, false
	}
	return page[:i+len(begin)+1] + tables + page[j:], true
}

// Summary is the matrix in one table for the README: each kernel, its
// probes, how far the probes' figures were from the kernel's own, and each
// functional step's result.
func Summary(results []KernelResult) string {
	var b strings.Builder
	b.WriteString("| kernel | probes up | major faults vs `maj_flt` | stall vs PSI | cgroups | runs | policies |\n|---|---|---|---|---|---|---|\n")
	for _, res := range results {
		line := []string{res.Name + " (" + orDash(res.Image.Release) + ")", res.ProbesUp(), res.spread("faults "), res.spread("stall ")}
		for _, step := range []string{"cgroups", "runs", "policies"} {
			line = append(line, res.stepResult(step))
		}
		b.WriteString("| " + strings.Join(line, " | ") + " |\n")
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// spread is the range of the leading percentages of the figures whose
// names start with prefix ("-0.3% … +1.2%"), or "–".
func (r KernelResult) spread(prefix string) string {
	lo, hi, n := 0.0, 0.0, 0
	for _, rep := range r.Reports {
		for _, f := range rep.Figures {
			if !strings.HasPrefix(f.Name, prefix) {
				continue
			}
			num, _, ok := strings.Cut(f.Value, "%")
			v, err := strconv.ParseFloat(num, 64)
			if !ok || err != nil {
				continue
			}
			if n == 0 || v < lo {
				lo = v
			}
			if n == 0 || v > hi {
				hi = v
			}
			n++
		}
	}
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%+g%% … %+g%% (%d)", lo, hi, n)
}

// stepResult is "pass", "FAIL" or "not run" with the step's tests passed.
func (r KernelResult) stepResult(name string) string {
	rep, ok := r.Step(name)
	if !ok {
		return "not run"
	}
	passed, na := 0, 0
	for _, t := range rep.Tests {
		switch t.Result {
		case "PASS":
			passed++
		case NotApplicable:
			na++
		}
	}
	counts := fmt.Sprintf("%d/%d", passed, len(rep.Tests)-na)
	if na > 0 {
		counts += fmt.Sprintf(", %d not applicable", na)
	}
	if !rep.Pass {
		return "FAIL (" + counts + ")"
	}
	return "pass (" + counts + ")"
}

// Failures says, a line each, what failed where: a kernel that could not be
// fetched or booted, each failed test with its last log lines, and a step
// that failed with no test failed (a timeout, a crash) with its output's
// last lines. It is what a reader of the run's last lines needs first.
func Failures(results []KernelResult) []string {
	var out []string
	for _, res := range results {
		if res.Err != "" {
			out = append(out, res.Name+": "+res.Err)
		}
		for _, rep := range res.Reports {
			if rep.Kind != "step" {
				continue
			}
			for _, t := range rep.Tests {
				if t.Result == "SKIP" {
					out = append(out, fmt.Sprintf("%s, %s: %s skipped: a test that cannot run here fails, and one that does not apply says so (testenv.NotApplicable)", res.Name, rep.Step, t.Name))
				}
			}
			if rep.Pass {
				continue
			}
			named := false
			for _, t := range rep.Tests {
				if t.Result != "FAIL" {
					continue
				}
				named = true
				line := fmt.Sprintf("%s, %s: %s failed after %.0fs", res.Name, rep.Step, t.Name, t.Seconds)
				if t.Why != "" {
					line += ": " + t.Why
				}
				out = append(out, line)
			}
			if !named {
				out = append(out, fmt.Sprintf("%s, %s: failed after %.0fs: %s", res.Name, rep.Step, rep.Seconds, lastLines(rep.Output, whyLines)))
			}
		}
	}
	return out
}

// lastLines is the last n non-empty lines of s, joined by " / ".
func lastLines(s string, n int) string {
	var lines []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 0 {
		return "no output"
	}
	return strings.Join(lines, " / ")
}
