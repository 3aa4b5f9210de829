package master

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/thrashscope/thrashscope/internal/run"
)

// TestLogWriterKeepsTheLastLine: the reason a run fails with names a
// consumer's last error line, valid UTF-8 and bounded, not all it wrote.
func TestLogWriterKeepsTheLastLine(t *testing.T) {
	w := &logWriter{l: slog.New(slog.DiscardHandler)}
	if w.Last() != "" {
		t.Fatalf("before any write: %q", w.Last())
	}
	w.Write([]byte("first\n"))
	w.Write([]byte("loadgen: joining the run cgroup at the planned start: write 0: no such device\n\n"))
	if got, want := w.Last(), "loadgen: joining the run cgroup at the planned start: write 0: no such device"; got != want {
		t.Errorf("Last() = %q, want %q", got, want)
	}
	w.Write([]byte("a\nb\xc3\n"))
	if got := w.Last(); got != "b\uFFFD" {
		t.Errorf("Last() = %q, want the last line, made valid", got)
	}
	w.Write([]byte(strings.Repeat("é", 400)))
	if got := w.Last(); len(got) > maxReasonLine+len("…") || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "éé") {
		t.Errorf("a long line is kept as %d bytes: %q", len(got), got)
	}
}

func TestMakespan(t *testing.T) {
	at := func(s int) *time.Time {
		v := time.Unix(1000+int64(s), 0)
		return &v
	}
	cs := []run.ConsumerRecord{
		{ActualStart: at(10), ActualEnd: at(50)},
		{ActualStart: at(5), ActualEnd: at(40)},
		{ActualStart: at(20), ActualEnd: at(70)},
	}
	if got := makespan(cs); got != 65 {
		t.Errorf("makespan %g, want 65 (first start 5 s to last end 70 s)", got)
	}
	cs[1].ActualEnd = nil
	if got := makespan(cs); got != 0 {
		t.Errorf("makespan %g with a consumer not ended, want 0", got)
	}
}
