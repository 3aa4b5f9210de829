// Package consumer is one consumer process of a run (loadgen consume): it
// waits outside the run cgroup, joins it at its planned start, fills its
// region and writes W pages a cycle until t_f. It speaks to the master by
// Messages on a pipe and, for its cycles, on the run's shared cycle board.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/run"
)

// Consumer modes, as in --mode.
const (
	ModeCycles = "cycles" // Maziero et al.'s write cycles
	ModeFill   = "fill"   // seed 002's progressive fill
)

const (
	pageSize = 4096
	// Writes between looks at the stop flag: free next to the writes, and
	// SIGTERM lands soon even when each write is a swap-in (bench/
	// README.md, Where the defaults come from).
	stopCheckWrites = 256
	// Fill bytes between looks at the stop flag.
	stopCheckFill = 64 << 10
)

// ErrParentGone: the master died (its control pipe closed, or the consumer
// was reparented before it could arm PR_SET_PDEATHSIG). The consumer exits
// at once, status 0, and reports nothing.
var ErrParentGone = errors.New("the master is gone")

// Config is one consumer process: loadgen consume's flags.
type Config struct {
	Index int
	Mode  string
	// Size is the region in cycles mode and one chunk in fill mode.
	Size   int64
	Writes int
	Sleep  time.Duration
	// Start is the planned start (zero: at once); End is t_f (cycles mode).
	Start, End time.Time
	// Cycles, when above 0, is the consumer's work: it exits after that
	// many write cycles, or at End if that comes first.
	Cycles  int64
	Backing string
	// FileDir holds the unlinked backing file; empty is os.TempDir().
	FileDir     string
	Fill        string
	ParentPID   int
	Chunks      int
	Repeats     int
	HotInterval time.Duration
	// Join: at Start, the consumer moves itself into the run cgroup by
	// writing to the run cgroup's cgroup.procs, which the master passes
	// open (fd 4 for loadgen consume).
	Join bool
	// JoinUnified: right after joining the run cgroup, the consumer joins
	// its group in the unified hierarchy too (fd 6), where memory is on
	// cgroup v1: its memory group first, so that its cgroup2 group never
	// holds it while its memory is elsewhere.
	JoinUnified bool
	// CycleLog: the consumer logs its write cycles in its slot of the
	// run's cycle board (fd 5 for loadgen consume) instead of reporting
	// each on the pipe.
	CycleLog bool
}

// Command adds the hidden consume command to app and returns it with
// the config its flags fill. main and ParseArgs share it, so Args
// and the parser cannot drift apart.
func Command(app *kingpin.Application) (*kingpin.CmdClause, *Config) {
	c := &Config{}
	cmd := app.Command("consume", "One consumer process (internal: loadgen run and the observer start it, with the control pipe on stdin and the message pipe on fd 3).").Hidden()
	cmd.Flag("index", "Consumer index; names the process consumer-NN.").Default("0").IntVar(&c.Index)
	cmd.Flag("mode", "cycles (write cycles until --end) or fill (progressive fill).").Default(ModeCycles).EnumVar(&c.Mode, ModeCycles, ModeFill)
	cmd.Flag("size", "Region size in bytes (fill mode: chunk size).").Default("0").Int64Var(&c.Size)
	cmd.Flag("writes", "Writes per cycle (W).").Default("0").IntVar(&c.Writes)
	cmd.Flag("sleep", "Sleep after each cycle (t_s).").Default("0s").DurationVar(&c.Sleep)
	cmd.Flag("start", "Planned start, unix ns; 0 or past: at once.").Default("0").SetValue(unixNanoValue{&c.Start})
	cmd.Flag("end", "Finish time t_f, unix ns.").Default("0").SetValue(unixNanoValue{&c.End})
	cmd.Flag("cycles", "Exit after this many write cycles (or at --end if first); 0: at --end.").Default("0").Int64Var(&c.Cycles)
	cmd.Flag("backing", "anon (private anonymous memory) or file (an unlinked file in --file-dir).").Default(run.BackingAnon).EnumVar(&c.Backing, run.BackingAnon, run.BackingFile)
	cmd.Flag("file-dir", "Directory for --backing=file; empty: $TMPDIR.").Default("").StringVar(&c.FileDir)
	cmd.Flag("fill", "random (incompressible) or zero.").Default(run.FillRandom).EnumVar(&c.Fill, run.FillRandom, run.FillZero)
	cmd.Flag("parent-pid", "The master's pid; the consumer exits if its parent is already another process. 0: no check.").Default("0").IntVar(&c.ParentPID)
	cmd.Flag("chunks", "Fill mode: chunks per repeat.").Default("0").IntVar(&c.Chunks)
	cmd.Flag("repeats", "Fill mode: repeats.").Default("0").IntVar(&c.Repeats)
	cmd.Flag("hot-interval", "Fill mode: pause between the helper's passes over earlier chunks.").Default("0s").DurationVar(&c.HotInterval)
	cmd.Flag("join", "At --start, join the run cgroup through fd 4, its cgroup.procs opened by the master.").BoolVar(&c.Join)
	cmd.Flag("join-unified", "With --join, then join its group in the unified hierarchy through fd 6 (memory on cgroup v1).").BoolVar(&c.JoinUnified)
	cmd.Flag("cycle-log", "Log write cycles in slot --index of the run's cycle board, fd 5 (shared memory the master reads), not on the message pipe.").BoolVar(&c.CycleLog)
	return cmd, c
}

// unixNanoValue is a time flag in unix nanoseconds; 0 is the zero time.
type unixNanoValue struct{ t *time.Time }

func (v unixNanoValue) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q: want unix nanoseconds", s)
	}
	*v.t = fromUnixNano(n)
	return nil
}

func (v unixNanoValue) String() string {
	if v.t == nil {
		return "0"
	}
	return strconv.FormatInt(toUnixNano(*v.t), 10)
}

func toUnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Args is the command line after the program name, starting with
// "consume", that gives back c when parsed.
func (c Config) Args() []string {
	i := strconv.Itoa
	return []string{"consume",
		"--index=" + i(c.Index),
		"--mode=" + c.Mode,
		"--size=" + strconv.FormatInt(c.Size, 10),
		"--writes=" + i(c.Writes),
		"--sleep=" + c.Sleep.String(),
		"--start=" + strconv.FormatInt(toUnixNano(c.Start), 10),
		"--end=" + strconv.FormatInt(toUnixNano(c.End), 10),
		"--cycles=" + strconv.FormatInt(c.Cycles, 10),
		"--backing=" + c.Backing,
		"--file-dir=" + c.FileDir,
		"--fill=" + c.Fill,
		"--parent-pid=" + i(c.ParentPID),
		"--chunks=" + i(c.Chunks),
		"--repeats=" + i(c.Repeats),
		"--hot-interval=" + c.HotInterval.String(),
		map[bool]string{true: "--join", false: "--no-join"}[c.Join],
		map[bool]string{true: "--join-unified", false: "--no-join-unified"}[c.JoinUnified],
		map[bool]string{true: "--cycle-log", false: "--no-cycle-log"}[c.CycleLog],
	}
}

// ParseArgs parses what Args writes and validates it.
func ParseArgs(args []string) (Config, error) {
	app := kingpin.New("loadgen", "").Terminate(nil).UsageWriter(io.Discard).ErrorWriter(io.Discard)
	cmd, c := Command(app)
	got, err := app.Parse(args)
	if err != nil {
		return Config{}, err
	}
	if got != cmd.FullCommand() {
		return Config{}, fmt.Errorf("command %q: want consume", got)
	}
	return *c, c.Validate()
}

// Validate checks the flags for sense; the run spec's limits were checked
// by the master.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Index < 0 {
		bad("--index=%d: want 0 or more", c.Index)
	}
	if c.Size < pageSize {
		bad("--size=%d: want at least %d (a page)", c.Size, pageSize)
	}
	if c.Backing != run.BackingAnon && c.Backing != run.BackingFile {
		bad("--backing=%q: want anon or file", c.Backing)
	}
	if c.Fill != run.FillRandom && c.Fill != run.FillZero {
		bad("--fill=%q: want random or zero", c.Fill)
	}
	if c.ParentPID < 0 {
		bad("--parent-pid=%d: want a pid, or 0 for no check", c.ParentPID)
	}
	if c.JoinUnified && !c.Join {
		bad("--join-unified: only with --join (the memory group first)")
	}
	switch c.Mode {
	case ModeCycles:
		if c.Writes < 1 || c.Writes > run.MaxWrites {
			bad("--writes=%d: want 1 to %d", c.Writes, run.MaxWrites)
		}
		if c.Sleep < 0 {
			bad("--sleep=%s: want 0 or more", c.Sleep)
		}
		if c.Cycles < 0 || c.Cycles > run.MaxCycles {
			bad("--cycles=%d: want 0 (until --end) to %d", c.Cycles, run.MaxCycles)
		}
		if c.End.IsZero() {
			bad("--end: required in cycles mode (t_f, unix ns)")
		}
	case ModeFill:
		if c.Chunks < 1 {
			bad("--chunks=%d: want 1 or more", c.Chunks)
		}
		if c.Repeats < 1 {
			bad("--repeats=%d: want 1 or more", c.Repeats)
		}
		if c.HotInterval < 0 {
			bad("--hot-interval=%s: want 0 or more", c.HotInterval)
		}
	default:
		bad("--mode=%q: want cycles or fill", c.Mode)
	}
	return errors.Join(errs...)
}

// Consume runs one consumer: it waits for the go byte on ctl, then for
// cfg.Start, then joins the run cgroup through join (when cfg.Join), then
// allocates and writes (or fills chunks) and sends messages on rep.
// A nil ctl means no go byte and no watch for the master's death.
// Cancelling ctx is SIGTERM: the consumer messages Done and returns nil.
// EOF on ctl returns ErrParentGone and reports nothing more.
func Consume(ctx context.Context, cfg Config, ctl io.Reader, rep, join io.Writer) error {
	return ConsumeLogged(ctx, cfg, ctl, rep, join, nil)
}

// ConsumeLogged is Consume with the write cycles logged on the run's cycle
// board instead of sent on rep; nil log sends them on rep.
func ConsumeLogged(ctx context.Context, cfg Config, ctl io.Reader, rep, join io.Writer, log *CycleLog) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Join && join == nil {
		return errors.New("--join: no cgroup.procs to join through")
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	goByte := make(chan struct{})
	if ctl == nil {
		close(goByte)
	} else {
	}
	c := &consumer{cfg: cfg, ctx: runCtx, term: ctx, rep: rep, log: log}
	c.lock.send = c.sendAside
	if ctl != nil {
		go watchControl(ctl, goByte, cancel, c.lock.request)
	}
	defer context.AfterFunc(runCtx, func() { c.stop.Store(true) })()

	select {
	case <-goByte:
	case <-runCtx.Done():
		return c.done(0)
	}
	if !sleepCtx(runCtx, time.Until(cfg.Start)) {
		return c.done(0)
	}
	began := time.Now()
	if cfg.Join {
		// The consumer waited outside the run cgroup, so the thrash it is
		// about to join neither slowed its wake-up nor holds its start-up
		// memory; "0" is the writer itself, whole thread group.
		if _, err := io.WriteString(join, "0"); err != nil {
			return c.fail(fmt.Errorf("joining the run cgroup at the planned start: %w", err))
		}
	}
	if cfg.Mode == ModeFill {
		return c.fillChunks(began)
	}
	return c.cycles(began)
}

// watchControl closes goByte at the first byte, passes each later lock
// or unlock request to lock, and cancels with ErrParentGone at EOF (or any
// read error): the master is gone.
func watchControl(ctl io.Reader, goByte chan<- struct{}, cancel context.CancelCauseFunc, lock func(bool)) {
	var b [1]byte
	started := false
	for {
		n, err := ctl.Read(b[:])
		switch {
		case n == 0:
		case !started:
			started = true
			close(goByte)
		case b[0] == ControlLock:
			lock(true)
		case b[0] == ControlUnlock:
			lock(false)
		}
		if err != nil {
			cancel(ErrParentGone)
			return
		}
	}
}

type consumer struct {
	cfg  Config
	ctx  context.Context // done on SIGTERM or when the master is gone
	term context.Context // done on SIGTERM only
	stop atomic.Bool     // ctx is done; cheap to poll in loops
	rep  io.Writer
	log  *CycleLog // nil: cycles are sent on rep
	buf  [MessageSize]byte
	lock regionLock
}

// sendAside sends a message from outside the consumer's own loop (the
// control pipe's reader), with a buffer of its own.
func (c *consumer) sendAside(m Message) error {
	if c.parentGone() {
		return ErrParentGone
	}
	var buf [MessageSize]byte
	b, _ := m.AppendBinary(buf[:0])
	return c.write(b)
}

func (c *consumer) parentGone() bool { return errors.Is(context.Cause(c.ctx), ErrParentGone) }

func (c *consumer) send(r Message) error {
	if c.parentGone() {
		return ErrParentGone
	}
	b, _ := r.AppendBinary(c.buf[:0])
	if err := c.write(b); err != nil {
		return fmt.Errorf("writing the %s message: %w", r.Kind, err)
	}
	return nil
}

// write writes one encoded message. A message is smaller than PIPE_BUF, so
// a write is whole or nothing. In a cgroup v1 run under the OOM guard the
// pipe's buffer page is charged to the run and fails with ENOMEM while the
// cgroup is at its limit: wait for the guard's reclaim rather than fail
// the run.
func (c *consumer) write(b []byte) error {
	var err error
	for wait := time.Duration(0); ; wait += sendRetry {
		if _, err = c.rep.Write(b); !errors.Is(err, unix.ENOMEM) || wait >= maxSendWait {
			return err
		}
		time.Sleep(sendRetry)
	}
}

// How a message write that the cgroup's limit refused is retried.
const (
	sendRetry   = 20 * time.Millisecond
	maxSendWait = 30 * time.Second
)

// done reports Done; n counts cycles, or chunks in fill mode.
func (c *consumer) done(n int64) error {
	return c.send(DoneMessage(time.Now(), n, c.term.Err() != nil))
}

// fail reports a fatal error (best effort) and returns it.
func (c *consumer) fail(err error) error {
	if c.parentGone() {
		return ErrParentGone
	}
	r := Message{Kind: KindError}
	var errno unix.Errno
	if errors.As(err, &errno) {
		r.A = int64(errno)
	}
	_ = c.send(r)
	return err
}

// fill fills b as --fill says; false when the stop flag abandoned it.
func (c *consumer) fill(b []byte, seed uint64) bool {
	if c.cfg.Fill == run.FillZero {
		return fillZero(b, &c.stop)
	}
	return fillRandom(b, seed, &c.stop)
}

func (c *consumer) cycles(began time.Time) error {
	// Mapping allocates kernel structures charged to the run cgroup; under
	// the v1 OOM guard they fail with ENOMEM while it is at its limit, as a
	// message does: retry as a message does.
	var b []byte
	var err error
	for wait := time.Duration(0); ; wait += sendRetry {
		if b, err = mapRegion(c.cfg.Size, c.cfg.Backing, c.cfg.FileDir); !errors.Is(err, unix.ENOMEM) || wait >= maxSendWait || c.stop.Load() {
			break
		}
		time.Sleep(sendRetry)
	}
	if err != nil {
		return c.fail(err)
	}
	defer unix.Munmap(b)
	c.lock.attach(b)
	defer c.lock.detach()
	state := rand.Uint64()
	if !c.fill(b, state) {
		if err := c.send(StartedMessage(began, time.Time{})); err != nil {
			return err
		}
		return c.done(0)
	}
	if err := c.send(StartedMessage(began, time.Now())); err != nil {
		return err
	}
	var n int64
	for !c.stop.Load() && time.Now().Before(c.cfg.End) && (c.cfg.Cycles == 0 || n < c.cfg.Cycles) {
		t0 := time.Now()
		w := writeCycle(b, c.cfg.Writes, &state, &c.stop)
		d := time.Since(t0)
		n++
		if c.log != nil {
			c.log.Add(int64(w), d)
		} else if err := c.send(CycleMessage(w, d)); err != nil {
			return err
		}
		if n == c.cfg.Cycles {
			break // the work is done: no sleep after the last cycle
		}
		if !sleepCtx(c.ctx, min(c.cfg.Sleep, time.Until(c.cfg.End))) {
			break
		}
	}
	return c.done(n)
}

// sleepCtx sleeps for d (nothing when d <= 0); false when ctx ended it.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// wyrand (Wang Yi): one add and one 64×64→128 multiply per number, good
// enough for offsets and incompressible fill, and inlined in the loops.
const (
	wyAdd = 0xa0761d6478bd642f
	wyXor = 0xe7037ed1a0b428db
)

// Env is env for a consumer process: the Go runtime's asynchronous
// preemption is off (GODEBUG asyncpreemptoff=1). Its signal would reach any
// thread of the consumer, a thread started after the consumer joined the
// run included, whose signal stack the kernel then first writes inside the
// run cgroup: on cgroup v1 under the OOM guard, at the limit, that charge
// fails and the consumer dies of SIGSEGV. A consumer's loop has nothing
// to preempt for: it is one goroutine.
func Env(env []string) []string {
	const off = "asyncpreemptoff=1"
	out := make([]string, 0, len(env)+1)
	set := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok && !set {
			if v != "" {
				v += ","
			}
			kv, set = "GODEBUG="+v+off, true
		}
		out = append(out, kv)
	}
	if !set {
		out = append(out, "GODEBUG="+off)
	}
	return out
}
