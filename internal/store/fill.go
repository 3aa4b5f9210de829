package store

import (
	"bytes"
	"strconv"
)

// FillRow is one chunk of the fill experiment (seed 002), a line of
// fill.csv: fill time over the repeats, and the host's free memory and swap
// when the chunk was filled.
type FillRow struct {
	Chunk                  int
	AllocatedBytes         int64
	Repeats                int
	MeanSeconds, SDSeconds float64
	MemoryFreeBytes        float64
	SwapFreeBytes          float64
}

// FillColumns is the fill.csv header.
var FillColumns = []string{"chunk_index", "allocated_bytes", "repeats", "fill_seconds_mean", "fill_seconds_sd", "memory_free_bytes", "swap_free_bytes"}

// ParseFill reads a fill.csv.
func ParseFill(b []byte) ([]FillRow, error) {
	var rows []FillRow
	err := eachRecord(FillFile, bytes.NewReader(b), FillColumns, maxFillRows, func(n int, rec []string, col map[string]int) error {
		p := parser{rec: rec, col: col, bounds: fillBounds}
		r := FillRow{
			Chunk: int(p.int("chunk_index")), AllocatedBytes: p.int("allocated_bytes"), Repeats: int(p.int("repeats")),
			MeanSeconds: p.float("fill_seconds_mean"), SDSeconds: p.float("fill_seconds_sd"),
			MemoryFreeBytes: p.float("memory_free_bytes"), SwapFreeBytes: p.float("swap_free_bytes"),
		}
		if p.err != nil {
			return rowError{n + 2, p.err}
		}
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// FillCSV encodes fill rows with their header.
func FillCSV(rows []FillRow) []byte {
	recs := make([][]string, 0, len(rows)+1)
	recs = append(recs, FillColumns)
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	for _, r := range rows {
		recs = append(recs, []string{
			strconv.Itoa(r.Chunk), strconv.FormatInt(r.AllocatedBytes, 10), strconv.Itoa(r.Repeats),
			f(r.MeanSeconds, 6), f(r.SDSeconds, 6), f(r.MemoryFreeBytes, 0), f(r.SwapFreeBytes, 0),
		})
	}
	return appendCSV(nil, recs)
}
