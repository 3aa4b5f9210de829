// Command thrashtool is thrashscope's offline tool, beside the daemon as
// promtool is beside Prometheus: `thrashtool report` draws the report of
// ended runs, `thrashtool compare` runs one spec under several policies and
// compares them, `thrashtool findings` checks the paper's findings against a
// reproduction. They draw with gonum/plot, whose fonts the daemon would
// otherwise parse and keep resident; `observer report|compare|findings`
// runs this binary. main only wires flags; the work lives in internal/report,
// internal/compare and internal/findings.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"

	"github.com/thrashscope/thrashscope/internal/compare"
	"github.com/thrashscope/thrashscope/internal/findings"
	"github.com/thrashscope/thrashscope/internal/observer"
	"github.com/thrashscope/thrashscope/internal/policy"
	"github.com/thrashscope/thrashscope/internal/report"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/settings"
)

const defaultDataDir = "/var/lib/thrashscope"

// name is what the tool was called as: thrashtool, or observer when the
// daemon's binary handed a command over, so messages name what was typed.
var name = filepath.Base(os.Args[0])

func main() {
	app := kingpin.New(name, "thrashscope's offline tool: reports, policy comparisons and the paper's findings from recorded runs.")

	rep := app.Command("report", "Draw the report of ended runs: the paper's figures raw and smoothed, demand vs RSS per consumer, the stability overlay of several runs, and summary.txt.")
	var rc report.Config
	rep.Flag("run", "Run id to report on. Repeat it for several runs of one preset (the stability overlay).").Required().StringsVar(&rc.RunIDs)
	rep.Flag("out", "Directory to write the report to; made if missing.").Required().StringVar(&rc.OutDir)
	rep.Flag("data.dir", "The observer's --data.dir, or loadgen run's --out, holding runs/<id>/.").Default(defaultDataDir).StringVar(&rc.DataDir)

	fnd := app.Command("findings", "Check the findings of Maziero et al. (2013) against a reproduction (a data directory per preset: e1, e2, e3, e4 and fig12, as docs/reproduction; beside them, <profile>/<preset> for runs on an emulated swap device) and print them as the README's table, a column per device.")
	findingsDir := fnd.Flag("dir", "The reproduction: <dir>/<preset>/runs/<id>/.").Default("docs/reproduction").String()

	cmpCmd := app.Command("compare", "Run one spec under several thrash-control policies or kernel memory settings (each policy under each --settings), each repeated, interleaved, standalone (no daemon; run no other thrash meanwhile), and write the comparison (compare.txt: makespan, swap-ins, major faults, slowdowns, PSI, lateness, OOM kills, recovery, mean ± SD and 95 % intervals; a compressed swap's own cost) and its figure under --out.")
	var cc compare.Config
	cmpSpec := cmpCmd.Flag("spec", `The run spec, as POST /api/v1/runs takes it, without a policy; e.g. {"preset":"syn8","consumers":25}.`).String()
	cmpCmd.Flag("policy", "A policy to compare; repeat it ("+strings.Join(policy.Names(), ", ")+"; none when only --settings are given).").StringsVar(&cc.Policies)
	cmpCmd.Flag("settings", `A set of kernel memory settings to compare, a JSON object as a spec's "settings" (docs/settings.md); repeat it, e.g. --settings '{"swap":"disk"}' --settings '{"swap":"zram"}'.`).PlaceHolder("JSON").SetValue((*settingsList)(&cc.Settings))
	cmpCmd.Flag("settings.allow-host", "Let the settings change host-wide ones (swap, zswap, MGLRU, page cluster; swappiness on cgroup v2), journalled in /run/thrashscope and restored after each run.").BoolVar(&cc.AllowHostSettings)
	cmpRedraw := cmpCmd.Flag("redraw", "Run nothing: compare the ended runs already under --out (an interrupted comparison, or to draw one anew).").Bool()
	cmpCmd.Flag("repeats", "Runs of each policy.").Default("3").IntVar(&cc.Repeats)
	cmpCmd.Flag("timeout", "Abort a run still going after this long and go on with the next; the comparison keeps it as aborted, with the work it did (0: no bound but a run's own 4 h).").Default("0").DurationVar(&cc.Timeout)
	cmpCmd.Flag("out", "Directory for the runs and the comparison; made if missing.").Required().StringVar(&cc.OutDir)
	cmpCmd.Flag("loadgen", "The consumer binary; default: beside this one, else on PATH.").Default("").StringVar(&cc.Binary)

	app.Version(version.Print("thrashtool"))
	app.HelpFlag.Short('h')
	switch kingpin.MustParse(app.Parse(os.Args[1:])) {
	case rep.FullCommand():
		os.Exit(runReport(rc))
	case cmpCmd.FullCommand():
		os.Exit(runCompare(cc, *cmpSpec, *cmpRedraw))
	case fnd.FullCommand():
		os.Exit(runFindings(*findingsDir))
	}
}

func runReport(rc report.Config) int {
	res, err := report.Build(rc)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s report: %v\n", name, err)
		return 1
	}
	for _, f := range res.Files {
		fmt.Println(f)
	}
	return 0
}

func runFindings(dir string) int {
	cols, err := findings.LoadColumns(dir)
	if err == nil {
		var rows []findings.Row
		if rows, err = findings.CheckColumns(cols); err == nil {
			fmt.Print(findings.Table(cols, rows))
			return 0
		}
	}
	fmt.Fprintf(os.Stderr, "%s findings: %v\n", name, err)
	return 1
}

// runCompare is the compare command.
func runCompare(cc compare.Config, specJSON string, redraw bool) int {
	if redraw {
		results, err := compare.Redraw(cc.OutDir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s compare --redraw: %v\n", name, err)
			return 1
		}
		fmt.Print(compare.Table(results))
		return 0
	}
	if specJSON == "" {
		fmt.Fprintf(os.Stderr, "%s compare: --spec is required (or --redraw)\n", name)
		return 2
	}
	spec, err := run.DecodeSpec([]byte(specJSON))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s compare: --spec: %v\n", name, err)
		return 2
	}
	cc.Spec, cc.ProcfsPath, cc.Progress = spec, "/proc", os.Stderr
	if len(cc.Policies) == 0 && len(cc.Settings) > 0 {
		cc.Policies = []string{policy.None}
	}
	if cc.Binary == "" {
		cc.Binary = observer.FindLoadgen()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	results, err := compare.Run(ctx, cc)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s compare: %v\n", name, err)
		return 1
	}
	fmt.Print(compare.Table(results))
	fmt.Fprintf(os.Stderr, "wrote %s/compare.txt, compare.png and compare.svg\n", cc.OutDir)
	return 0
}

// settingsList reads each --settings.
type settingsList []settings.Asked

func (v *settingsList) Set(text string) error {
	var a settings.Asked
	if err := a.UnmarshalJSON([]byte(text)); err != nil {
		return fmt.Errorf("--settings: %w", err)
	}
	*v = append(*v, a)
	return nil
}

func (v *settingsList) String() string { return fmt.Sprint(len(*v), " sets") }

// IsCumulative lets --settings repeat.
func (v *settingsList) IsCumulative() bool { return true }
