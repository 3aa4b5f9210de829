package store

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/thrashscope/thrashscope/internal/row"
	"github.com/thrashscope/thrashscope/internal/run"
	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// A table read back from the data dir is input: every number is checked
// against the range thrashscope writes it in, and refused, naming the file,
// line and column, when it is outside it. NaN and ±Inf are outside every
// range, so no reader (a report's peak, the swap-in rule's threshold, a
// comparison's sums) meets a value its arithmetic cannot take.

// bound is the range of one column. orUnknown admits Unknown (-1) too.
type bound struct {
	lo, hi    float64
	orUnknown bool
}

// The ranges, generous where a figure has no physical ceiling but far from
// where a float64 sum of a day of rows could overflow.
var (
	// elapsedBound: the consumer alone, the run and its grace, each at most
	// MaxRunDuration.
	elapsedBound = bound{0, 3 * run.MaxRunDuration.Seconds(), false}
	percentBound = bound{0, 100, false}
	rateBound    = bound{0, 1e12, false}
	bytesBound   = bound{0, math.Ldexp(1, 62), false}
	// stallBound: a share of one CPU summed over threads and consumers.
	stallBound    = bound{0, 1e7, true}
	consumerBound = bound{0, run.MaxConsumers, false}
	pidBound      = bound{0, 1 << 22, false} // PID_MAX_LIMIT
)

var sampleBounds = withHostBounds(map[string]bound{
	"elapsed_seconds":        elapsedBound,
	"memory_available_bytes": bytesBound, "swap_free_bytes": bytesBound,
	"consumers_active": consumerBound, "consumers_planned": consumerBound,
	"demand_bytes": bytesBound, "cgroup_usage_bytes": bytesBound,
	"consumer_stall_percent": stallBound,
})

// withHostBounds adds the host's indicators' bounds: a share 0-100, or a
// rate.
func withHostBounds(m map[string]bound) map[string]bound {
	for _, c := range row.HostColumns {
		m[c.Name] = rateBound
		if c.Percent {
			m[c.Name] = percentBound
		}
	}
	return m
}

var processBounds = map[string]bound{
	"elapsed_seconds": elapsedBound,
	// the consumer that runs alone first is numbered after the run's own
	"consumer": {0, run.MaxConsumers, false}, "pid": pidBound,
	"demand_bytes": bytesBound, "resident_bytes": bytesBound, "swap_bytes": bytesBound,
	"working_set_bytes":       {0, bytesBound.hi, true},
	"major_faults_per_second": {0, rateBound.hi, true},
	"stall_percent":           stallBound,
}

var fillBounds = map[string]bound{
	"chunk_index": consumerBound, "allocated_bytes": bytesBound, "repeats": {1, run.MaxRepeats, false},
	"fill_seconds_mean": elapsedBound, "fill_seconds_sd": elapsedBound,
	"memory_free_bytes": bytesBound, "swap_free_bytes": bytesBound,
}

// maxCommBytes bounds a comm read back: the kernel's is at most 15 bytes.
const maxCommBytes = 64

// maxLineBytes bounds one line of a table read back: thrashscope's longest,
// a samples.csv row, is under 1 KiB.
const maxLineBytes = 64 << 10

// Row bounds of the tables read back, so that what a reader holds is
// bounded whatever the file: a run's samples at the shortest interval
// (100 ms) for its longest (run.MaxRunDuration); processes.csv rows for 512
// consumers sampled each second for ten minutes (docs/runs.md has what
// they hold).
const (
	maxSampleRows  = int(run.MaxRunDuration/(100*time.Millisecond)) + 1
	maxProcessRows = 512 * 600
	maxFillRows    = 1 << 16
)

// eachRecord reads a table with a header from r a line at a time, checks
// that the wanted columns are there, and calls fn with each record (valid
// only until fn returns) and its row number from 0; col maps each column
// name to its index. A line over maxLineBytes or a row past maxRows is
// refused as it comes, before it is held: a table is streamed, never read
// whole.
func eachRecord(file string, r io.Reader, want []string, maxRows int, fn func(n int, rec []string, col map[string]int) error) error {
	if err := readRecords(r, want, maxRows, fn); err != nil {
		if _, ok := err.(rowError); ok {
			return fmt.Errorf("%s line %w", file, err)
		}
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// rowError is a row's own error, its line's number first.
type rowError struct {
	line int
	err  error
}

func (e rowError) Error() string { return fmt.Sprintf("%d: %v", e.line, e.err) }
func (e rowError) Unwrap() error { return e.err }

func readRecords(r io.Reader, want []string, maxRows int, fn func(n int, rec []string, col map[string]int) error) error {
	cr := csv.NewReader(&lineBound{r: r})
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return errors.New("empty: no header")
	}
	if err != nil {
		return err
	}
	col := make(map[string]int, len(header))
	for i, name := range header {
		col[strings.Clone(name)] = i
	}
	for _, name := range want {
		if _, ok := col[name]; !ok {
			return fmt.Errorf("no %s column", name)
		}
	}
	for n := 0; ; n++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if n == maxRows {
			return fmt.Errorf("more than %d rows: more than a run writes; not thrashscope's", maxRows)
		}
		if err := fn(n, rec, col); err != nil {
			return err
		}
	}
}

// lineBound passes r through, and fails a line longer than maxLineBytes.
type lineBound struct {
	r    io.Reader
	line int // bytes since the last newline
	n    int // lines read, from 1
}

func (l *lineBound) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for _, c := range p[:n] {
		if c == '\n' {
			l.line, l.n = 0, l.n+1
			continue
		}
		if l.line++; l.line > maxLineBytes {
			return 0, fmt.Errorf("line %d is longer than %d bytes: not thrashscope's", l.n+1, maxLineBytes)
		}
	}
	return n, err
}

// parser reads typed fields of one record, each checked against its
// column's bound; the first error sticks.
type parser struct {
	rec    []string
	col    map[string]int
	bounds map[string]bound
	err    error
}

func (p *parser) field(name string) string { return p.rec[p.col[name]] }

func (p *parser) fail(name, format string, a ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("%s: %s", name, fmt.Sprintf(format, a...))
	}
}

// check holds v to the column's bound.
func (p *parser) check(name string, v float64) {
	b, ok := p.bounds[name]
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		p.fail(name, "%v is not a finite number", v)
	case !ok:
	case b.orUnknown && v == Unknown:
	case v < b.lo || v > b.hi:
		unknown := ""
		if b.orUnknown {
			unknown = fmt.Sprintf(", or %d for unknown", Unknown)
		}
		p.fail(name, "%s is outside %g to %g%s", strictjson.Clip(p.field(name)), b.lo, b.hi, unknown)
	}
}

func (p *parser) float(name string) float64 {
	v, err := strconv.ParseFloat(p.field(name), 64)
	if err != nil {
		p.fail(name, "%q is not a number", strictjson.Clip(p.field(name)))
		return 0
	}
	p.check(name, v)
	return v
}

func (p *parser) int(name string) int64 {
	v, err := strconv.ParseInt(p.field(name), 10, 64)
	if err != nil {
		p.fail(name, "%q is not an integer", strictjson.Clip(p.field(name)))
		return 0
	}
	p.check(name, float64(v))
	return v
}

// text reads a string column: valid UTF-8, at most n bytes.
func (p *parser) text(name string, n int) string {
	s := p.field(name)
	if !utf8.ValidString(s) || len(s) > n {
		p.fail(name, "%q is not text of at most %d bytes", strictjson.Clip(s), n)
	}
	return s
}

// after checks that a row's elapsed_seconds does not go back: a table is
// in time order, and strictly so when each row is its own sample.
func (p *parser) after(prev, cur float64, strict bool) {
	if cur < prev || strict && cur == prev {
		p.fail("elapsed_seconds", "%g is not after the row before's %g: the rows are out of time order", cur, prev)
	}
}
