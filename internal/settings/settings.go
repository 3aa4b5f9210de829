package settings

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/thrashscope/thrashscope/internal/strictjson"
)

// Setting is one kernel memory setting a run can name, held as data: the
// file it writes, whether that file is the host's or the run's own cgroup's,
// the kernel option that provides it, and how a spec's value becomes what
// the file takes.
type Setting struct {
	// Name is as a run spec names it.
	Name string
	// Host: a host-wide file, changed only with the operator's opt-in and
	// through the journal; otherwise a file of the run's own cgroup.
	Host bool
	// File is the kernel file: a path on the host, or a cgroup file's
	// name; none for a setting with an apply of its own (swap).
	File string
	// V1File is, for a host-wide setting the memory controller keeps per
	// group on cgroup v1, the run's memory cgroup's file that holds it
	// there: then it is the run's own, not the host's.
	V1File string
	// V2Only marks a run cgroup's file only cgroup v2 has.
	V2Only bool
	// Config is the kernel option without which the file is missing.
	Config string
	// Takes says what values it takes, for messages.
	Takes string
	// Value turns a spec's JSON value into what the file is written.
	Value func(raw json.RawMessage) (string, error)
	// apply puts the run under the value, for a setting that is more than
	// one file written; nil writes File.
	apply func(a *applier, value string) error
	// check says, before a run starts, whether the host can take the
	// value, for a setting with an apply of its own.
	check func(root, value string) error
}

// HostWide says whether the setting changes the host, given whether the
// run's memory cgroup is on cgroup v2.
func (s Setting) HostWide(v2 bool) bool { return s.Host && (v2 || s.V1File == "") }

// Registered is every setting, by name.
var Registered = []Setting{
	{Name: "swap", Host: true, Config: "CONFIG_SWAP (and CONFIG_ZRAM, CONFIG_ZSWAP for those)",
		Takes: `"disk", "zram" or "zswap"`, Value: choice(map[string]string{"disk": SwapDisk, "zram": SwapZram, "zswap": SwapZswap}),
		apply: (*applier).swap, check: checkSwap},
	{Name: "swappiness", Host: true, File: "/proc/sys/vm/swappiness", V1File: "memory.swappiness", Config: "CONFIG_SWAP",
		Takes: "0 to 200", Value: integer(0, 200)},
	{Name: "mglru", Host: true, File: "/sys/kernel/mm/lru_gen/enabled", Config: "CONFIG_LRU_GEN",
		Takes: `"on" or "off"`, Value: choice(map[string]string{"on": "y", "off": "n"})},
	{Name: "mglru_min_ttl_ms", Host: true, File: "/sys/kernel/mm/lru_gen/min_ttl_ms", Config: "CONFIG_LRU_GEN",
		Takes: "0 to 60000 (ms; 0 is off)", Value: integer(0, 60_000)},
	{Name: "page_cluster", Host: true, File: "/proc/sys/vm/page-cluster", Config: "CONFIG_SWAP",
		Takes: "0 to 10 (swap readahead of 2^n pages)", Value: integer(0, 10)},
	{Name: "zswap", Host: true, File: "/sys/module/zswap/parameters/enabled", Config: "CONFIG_ZSWAP",
		Takes: `"on" or "off"`, Value: choice(map[string]string{"on": "Y", "off": "N"})},
	{Name: "zswap_compressor", Host: true, File: "/sys/module/zswap/parameters/compressor", Config: "CONFIG_ZSWAP",
		Takes: "a compressor /proc/crypto lists (lzo, lz4, zstd, …)", Value: word, check: checkCompressor},
	{Name: "memory_high", File: "memory.high", V2Only: true, Config: "the memory controller on cgroup v2",
		Takes: "bytes, at least 16 MiB", Value: integer(16<<20, math.MaxInt64)},
}

// Lookup is the named setting.
func Lookup(name string) (Setting, bool) {
	i := slices.IndexFunc(Registered, func(s Setting) bool { return s.Name == name })
	if i < 0 {
		return Setting{}, false
	}
	return Registered[i], true
}

// Names lists the settings' names.
func Names() []string {
	var out []string
	for _, s := range Registered {
		out = append(out, s.Name)
	}
	return out
}

// Parse is the value the setting's file is written for a spec's raw value;
// the error names the setting and what it takes.
func (s Setting) Parse(raw json.RawMessage) (string, error) {
	v, err := s.Value(raw)
	if err != nil {
		return "", fmt.Errorf("%s: %w; want %s", s.Name, err, s.Takes)
	}
	return v, nil
}

// Available says whether this host's kernel has a host-wide setting's file
// under root ("" is /); the error names the file and the kernel option.
func (s Setting) Available(root string) error {
	if !s.Host || s.File == "" {
		return nil // the run's cgroup's files, and swap's, are checked where they are used
	}
	if _, err := os.Stat(filepath.Join(root, s.File)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: this kernel has no %s (%s): leave %s out here", s.Name, s.File, s.Config, s.Name)
		}
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	return nil
}

// choice takes one of the keys of m, a JSON string, and writes its value.
func choice(m map[string]string) func(json.RawMessage) (string, error) {
	return func(raw json.RawMessage) (string, error) {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", errors.New("want a JSON string")
		}
		out, ok := m[v]
		if !ok {
			return "", fmt.Errorf("%q", strictjson.Clip(v))
		}
		return out, nil
	}
}

// integer takes a JSON integer from lo to hi.
func integer(lo, hi int64) func(json.RawMessage) (string, error) {
	return func(raw json.RawMessage) (string, error) {
		n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			return "", fmt.Errorf("%s is not a whole number", strictjson.Clip(string(raw)))
		}
		if n < lo || n > hi {
			return "", fmt.Errorf("%d is out of range", n)
		}
		return strconv.FormatInt(n, 10), nil
	}
}

// word takes a JSON string of letters, digits, - and _: a name a kernel
// parameter takes, and nothing a file could read as more.
func word(raw json.RawMessage) (string, error) {
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", errors.New("want a JSON string")
	}
	if v == "" || len(v) > 32 || strings.ContainsFunc(v, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) {
		return "", fmt.Errorf("%q is not a name", strictjson.Clip(v))
	}
	return v, nil
}

// checkCompressor takes only a compressor the kernel has loaded, as
// /proc/crypto lists it: zswap asked for another would have the kernel look
// for a module by that name.
func checkCompressor(root, name string) error {
	b, err := os.ReadFile(filepath.Join(root, "/proc/crypto"))
	if err != nil {
		return fmt.Errorf("reading the kernel's compressors: %w", err)
	}
	var have []string
	for _, block := range strings.Split(string(b), "\n\n") {
		var n, typ string
		for _, l := range strings.Split(block, "\n") {
			k, v, _ := strings.Cut(l, ":")
			switch strings.TrimSpace(k) {
			case "name":
				n = strings.TrimSpace(v)
			case "type":
				typ = strings.TrimSpace(v)
			}
		}
		if (typ == "compression" || typ == "scomp" || typ == "acomp") && !slices.Contains(have, n) {
			have = append(have, n)
		}
	}
	if !slices.Contains(have, name) {
		return fmt.Errorf("%q is not a compressor this kernel has loaded (/proc/crypto lists %s): modprobe its module first, or choose one of those", name, strings.Join(have, ", "))
	}
	return nil
}
