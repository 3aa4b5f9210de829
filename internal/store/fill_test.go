package store

import (
	"strings"
	"testing"
)

// fill.csv has one header definition: what FillCSV writes, ParseFill reads.
func TestParseFillReadsWhatFillCSVWrites(t *testing.T) {
	want := []FillRow{
		{Chunk: 0, AllocatedBytes: 128 << 20, Repeats: 5, MeanSeconds: 0.061234, SDSeconds: 0.002, MemoryFreeBytes: 1 << 33, SwapFreeBytes: 1 << 32},
		{Chunk: 1, AllocatedBytes: 256 << 20, Repeats: 5, MeanSeconds: 1.5, SDSeconds: 0.25, MemoryFreeBytes: 1 << 30, SwapFreeBytes: 1 << 31},
	}
	b := FillCSV(want)
	if header, _, _ := strings.Cut(string(b), "\n"); header != strings.Join(FillColumns, ",") {
		t.Errorf("header %q, want the FillColumns", header)
	}
	got, err := ParseFill(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
