package testenv

import (
	"strconv"
	"strings"
)

// VMARange parses an smaps header line "lo-hi perms ...", for tests that
// find a mapping by address.
func VMARange(line string) (lo, hi uint64, ok bool) {
	r, _, _ := strings.Cut(line, " ")
	l, h, found := strings.Cut(r, "-")
	if !found {
		return 0, 0, false
	}
	lo, err1 := strconv.ParseUint(l, 16, 64)
	hi, err2 := strconv.ParseUint(h, 16, 64)
	return lo, hi, err1 == nil && err2 == nil
}
