package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// unlimitedV1 is the least value v1 shows for "no limit": the page counter's
// maximum in bytes, LONG_MAX rounded down to a page (of up to 1 MiB).
const unlimitedV1 = math.MaxInt64 - 1<<20

// settingsV1 sets the limit; memsw would cap swap too (and a thrash needs
// it). Swappiness is inherited unless NoSwap, where a memcg swappiness of 0
// stops anon swap-out for this cgroup alone.
func settingsV1(l Limits) []setting {
	s := []setting{{file: "memory.limit_in_bytes", value: strconv.FormatInt(l.MemoryBytes, 10)}}
	if l.NoSwap {
		s = append(s, setting{file: "memory.swappiness", value: "0"})
	}
	return s
}

// checkV1 wants the memory hierarchy.
func checkV1(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "memory.limit_in_bytes")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("not in the cgroup v1 memory hierarchy (no memory.limit_in_bytes): use a directory under the memory controller's mount")
		}
		return err
	}
	return nil
}
