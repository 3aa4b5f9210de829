package report

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"strconv"

	"github.com/thrashscope/thrashscope/internal/store"
)

// FillRow is one chunk of the fill experiment (seed 002), as loadgen's
// fill.csv has it: fill time over the repeats, and the host's free memory
// and swap when the chunk was filled.
type FillRow struct {
	Chunk                  int
	AllocatedBytes         int64
	Repeats                int
	MeanSeconds, SDSeconds float64
	MemoryFreeBytes        float64
	SwapFreeBytes          float64
}

var fillColumns = []string{"chunk_index", "allocated_bytes", "repeats", "fill_seconds_mean", "fill_seconds_sd", "memory_free_bytes", "swap_free_bytes"}

// ParseFill reads a fill.csv.
func ParseFill(b []byte) ([]FillRow, error) {
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", store.FillFile, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s is empty: no header", store.FillFile)
	}
	col := map[string]int{}
	for i, name := range recs[0] {
		col[name] = i
	}
	for _, name := range fillColumns {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("%s has no %s column", store.FillFile, name)
		}
	}
	rows := make([]FillRow, 0, len(recs)-1)
	for n, rec := range recs[1:] {
		var bad error
		num := func(name string) float64 {
			v, err := strconv.ParseFloat(rec[col[name]], 64)
			if err != nil && bad == nil {
				bad = fmt.Errorf("%s line %d: %s: %q is not a number", store.FillFile, n+2, name, rec[col[name]])
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
