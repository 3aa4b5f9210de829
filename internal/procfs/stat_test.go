package procfs

import "testing"

func TestCPU(t *testing.T) {
	want := CPUSeconds{
		User: 1234.56, Nice: 1, System: 234.56, Idle: 98765.43,
		IOWait: 43.21, IRQ: 0, SoftIRQ: 7.89, Steal: 0.42,
	}
	for _, path := range fixtures {
		t.Run(path, func(t *testing.T) {
			got, err := newTestFS(t, path).CPU()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("CPU() = %+v, want %+v", got, want)
			}
		})
	}
}

func TestCPUNoCPULine(t *testing.T) {
	root := writeTree(t, map[string]string{"stat": "ctxt 301598\nbtime 1795309561\n"})
	if _, err := newTestFS(t, root).CPU(); err == nil {
		t.Fatal("CPU() without a cpu line: want error")
	}
}

// The "cpu" line as this kernel writes it reads as prometheus/procfs
// reads the whole file, but for the ticks between the two reads.
func TestCPUMatchesPrometheusProcfs(t *testing.T) {
	fs := newTestFS(t, "/proc")
	got, err := fs.CPU()
	if err != nil {
		t.Fatal(err)
	}
	st, err := fs.proc.Stat()
	if err != nil {
		t.Fatal(err)
	}
	w := st.CPUTotal
	for _, f := range []struct {
		name      string
		got, want float64
	}{{"user", got.User, w.User}, {"nice", got.Nice, w.Nice}, {"system", got.System, w.System}, {"idle", got.Idle, w.Idle},
		{"iowait", got.IOWait, w.Iowait}, {"irq", got.IRQ, w.IRQ}, {"softirq", got.SoftIRQ, w.SoftIRQ}, {"steal", got.Steal, w.Steal}} {
		// Two CPUs for up to a second between the reads.
		if f.got > f.want || f.want-f.got > 2 {
			t.Errorf("%s: %g s, prometheus/procfs read %g s just after", f.name, f.got, f.want)
		}
	}
}

func TestParseCPULine(t *testing.T) {
	for _, c := range []struct {
		text string
		want CPUSeconds
		ok   bool
	}{
		{"cpu  100 200 300 400\ncpu0 1 2 3 4\n", CPUSeconds{User: 1, Nice: 2, System: 3, Idle: 4}, true},     // before iowait
		{"cpu 1 2 3 4 5 6 7 8 9 10 11 12", CPUSeconds{0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08}, true}, // more fields than read
		{"cpu 1 2 3\n", CPUSeconds{}, false},
		{"cpu0 1 2 3 4\n", CPUSeconds{}, false},
		{"cpu 1 x 3 4\n", CPUSeconds{}, false},
		{"", CPUSeconds{}, false},
	} {
		got, err := parseCPULine([]byte(c.text))
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseCPULine(%q) = %+v, %v; want %+v (ok %v)", c.text, got, err, c.want, c.ok)
		}
	}
}

// BenchmarkCPU is a sample's read of the host's CPU times, the first line
// alone beside prometheus/procfs's parse of the whole file.
func BenchmarkCPU(b *testing.B) {
	fs := newTestFS(b, "/proc")
	b.Run("first-line", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fs.CPU(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prometheus-procfs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fs.proc.Stat(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
