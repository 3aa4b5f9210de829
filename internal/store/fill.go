package store

import (
	"bytes"
	"encoding/csv"
	"fmt"
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
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", FillFile, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s is empty: no header", FillFile)
	}
	col := map[string]int{}
	for i, name := range recs[0] {
		col[name] = i
	}
	for _, name := range FillColumns {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("%s has no %s column", FillFile, name)
		}
	}
	rows := make([]FillRow, 0, len(recs)-1)
	for n, rec := range recs[1:] {
		var bad error
		num := func(name string) float64 {
			v, err := strconv.ParseFloat(rec[col[name]], 64)
			if err != nil && bad == nil {
				bad = fmt.Errorf("%s line %d: %s: %q is not a number", FillFile, n+2, name, rec[col[name]])
			}
			return v
		}
		r := FillRow{
			Chunk: int(num("chunk_index")), AllocatedBytes: int64(num("allocated_bytes")), Repeats: int(num("repeats")),
			MeanSeconds: num("fill_seconds_mean"), SDSeconds: num("fill_seconds_sd"),
			MemoryFreeBytes: num("memory_free_bytes"), SwapFreeBytes: num("swap_free_bytes"),
		}
		if bad != nil {
			return nil, bad
		}
		rows = append(rows, r)
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
