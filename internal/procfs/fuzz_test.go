package procfs

import (
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// The procfs fuzzers feed each parser what a kernel, a hostile process name
// or a truncated read could put there. None may panic; what parses must be
// usable (a comm valid UTF-8, totals not negative). `make test` runs their
// seeds (the fixtures here); `make fuzz` runs each for a while.

func seedFile(f *testing.F, paths ...string) {
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join("testdata", "proc", p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzParseStat(f *testing.F) {
	seedFile(f, "4242/stat", "5151/stat")
	f.Add([]byte("7 (dataproc-\xc3) S 1 7 7 0 -1 0 11 0 3 0 250 50 0 0 20 0 1 0 900 8192 -2 0 0 0\n"))
	f.Add([]byte("7 (x) S"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parseStat(b)
		if err == nil && !utf8.ValidString(p.Comm) {
			t.Fatalf("comm %q is not valid UTF-8", p.Comm)
		}
	})
}

func FuzzStatusKB(f *testing.F) {
	seedFile(f, "4242/status")
	f.Add([]byte("Name:\tx\nVmSwap:\t   12 kB\n"))
	f.Add([]byte("\nVmSwap:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = statusKB(b, "VmSwap:")
	})
}

// FuzzMemoryPressure goes through prometheus/procfs's PSI parser, as the
// sampler does, from a file in a scratch procfs.
func FuzzMemoryPressure(f *testing.F) {
	seedFile(f, "pressure/memory")
	f.Add([]byte("some avg10=1.00 avg60=0.00 avg300=0.00 total=-5\n"))
	f.Add([]byte("full avg10=x total=1\n"))
	dir := f.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "pressure"), 0o755); err != nil {
		f.Fatal(err)
	}
	fs, err := NewFS(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, "pressure", "memory"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := fs.MemoryPressure()
		if err == nil && (p.SomeTotal < 0 || p.FullTotal < 0) {
			t.Fatalf("negative stall totals %+v from %q", p, b)
		}
	})
}
