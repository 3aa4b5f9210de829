package procfs

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParseSmaps: whatever parses has its shared split at most what was
// referenced, and at most the proportional share of resident memory.
func FuzzParseSmaps(f *testing.F) {
	for _, pid := range []string{"100", "200", "300", "500"} {
		b, err := os.ReadFile(filepath.Join("testdata", "smaps", pid))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("55d0c4a00000-55d0c4ce4000 r-xp 00000000 fe:00 1311 /bin/x\nRss: 8 kB\nPss: 4 kB\nReferenced: 8 kB\n7f00-7f01 rw-p 0 00:00 0\nRss: 4 kB\nReferenced: 4 kB\nSwap: 4 kB\n"))
	f.Add([]byte("Rss: 18446744073709551615 kB\nReferenced: 1 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseSmaps(b)
		if err != nil {
			return
		}
		if r.OwnReferenced > r.Referenced {
			t.Fatalf("own %d > referenced %d from %q", r.OwnReferenced, r.Referenced, b)
		}
	})
}
