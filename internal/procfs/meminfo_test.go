package procfs

import (
	"strings"
	"testing"
)

func TestMemory(t *testing.T) {
	want := Memory{
		TotalBytes:     16 << 30,
		AvailableBytes: 8 << 30,
		SwapTotalBytes: 4 << 30,
		SwapFreeBytes:  1 << 30,
	}
	for _, path := range fixtures {
		t.Run(path, func(t *testing.T) {
			got, err := newTestFS(t, path).Memory()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("Memory() = %+v, want %+v", got, want)
			}
		})
	}
}

func TestMemoryMissingLine(t *testing.T) {
	root := writeTree(t, map[string]string{"meminfo": "MemTotal:       16777216 kB\n" +
		"MemFree:         6291456 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n"})
	_, err := newTestFS(t, root).Memory()
	if err == nil || !strings.Contains(err.Error(), "MemAvailable") {
		t.Fatalf("Memory() without MemAvailable: got %v, want an error naming MemAvailable", err)
	}
}
