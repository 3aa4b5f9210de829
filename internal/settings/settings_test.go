package settings

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The registry: each setting once, a host-wide one at a kernel path the
// journal takes, each with the option that provides it.
func TestTheRegistryHoldsEachSetting(t *testing.T) {
	want := map[string]bool{"swap": true, "swappiness": true, "mglru": true, "mglru_min_ttl_ms": true, "page_cluster": true, "zswap": true, "zswap_compressor": true, "memory_high": false}
	if len(Registered) != len(want) {
		t.Fatalf("the registry holds %v, want %d settings", Names(), len(want))
	}
	for _, s := range Registered {
		host, ok := want[s.Name]
		if !ok || s.Host != host || s.Config == "" || s.Takes == "" || s.Value == nil {
			t.Errorf("%+v: want host %v, an option, what it takes and a value", s, host)
		}
		if (s.File == "") != (s.apply != nil) {
			t.Errorf("%s: want a file or an apply of its own", s.Name)
		}
		if s.Host && s.File != "" && !strings.HasPrefix(s.File, "/sys/") && !strings.HasPrefix(s.File, "/proc/sys/") {
			t.Errorf("%s: %s is not a kernel file the journal restores", s.Name, s.File)
		}
		if got, _ := Lookup(s.Name); got.Name != s.Name {
			t.Errorf("Lookup(%q) = %q", s.Name, got.Name)
		}
	}
}

// A value becomes what its file takes; a wrong one is refused naming the
// setting and what it takes.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		name, raw, want, err string
	}{
		{"swap", `"zram"`, "zram", ""},
		{"swap", `"nvme"`, "", `swap: "nvme"; want "disk", "zram" or "zswap"`},
		{"swappiness", `200`, "200", ""},
		{"swappiness", `201`, "", "swappiness: 201 is out of range"},
		{"mglru", `"off"`, "n", ""},
		{"mglru", `"on"`, "y", ""},
		{"mglru", `"maybe"`, "", `mglru: "maybe"; want "on" or "off"`},
		{"mglru", `1`, "", "mglru: want a JSON string"},
		{"mglru_min_ttl_ms", `1000`, "1000", ""},
		{"mglru_min_ttl_ms", `-1`, "", "mglru_min_ttl_ms: -1 is out of range"},
		{"page_cluster", `0`, "0", ""},
		{"page_cluster", `1.5`, "", "page_cluster: 1.5 is not a whole number"},
		{"zswap", `"on"`, "Y", ""},
		{"zswap_compressor", `"lz4"`, "lz4", ""},
		{"zswap_compressor", `"lz4\n1"`, "", "is not a name"},
		{"memory_high", `268435456`, "268435456", ""},
		{"memory_high", `4096`, "", "memory_high: 4096 is out of range"},
	} {
		s, _ := Lookup(c.name)
		got, err := s.Parse(json.RawMessage(c.raw))
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s %s: %q, %v; want %q", c.name, c.raw, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s %s: %v, want an error with %q", c.name, c.raw, err, c.err)
		}
	}
}

// A host-wide setting whose file the kernel lacks is refused naming the
// file and the kernel option.
func TestAvailable(t *testing.T) {
	root := t.TempDir()
	s, _ := Lookup("page_cluster")
	if err := s.Available(root); err == nil || !strings.Contains(err.Error(), "/proc/sys/vm/page-cluster") || !strings.Contains(err.Error(), "CONFIG_SWAP") {
		t.Errorf("missing file: %v", err)
	}
	os.MkdirAll(filepath.Join(root, "proc/sys/vm"), 0o755)
	os.WriteFile(filepath.Join(root, "proc/sys/vm/page-cluster"), []byte("3\n"), 0o644)
	if err := s.Available(root); err != nil {
		t.Errorf("present file: %v", err)
	}
	m, _ := Lookup("memory_high")
	if err := m.Available(root); err != nil {
		t.Errorf("a run's cgroup setting: %v", err)
	}
}

// zswap_compressor takes only a compressor /proc/crypto lists: another
// name would have the kernel look for a module by it.
func TestCompressorMustBeLoaded(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	crypto := "name         : lzo\ndriver       : lzo-scomp\nmodule       : kernel\ntype         : scomp\n\n" +
		"name         : deflate\ndriver       : deflate-generic\ntype         : acomp\n\n" +
		"name         : sha256\ndriver       : sha256-generic\ntype         : shash\n"
	if err := os.WriteFile(filepath.Join(root, "proc/crypto"), []byte(crypto), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"lzo": "", "deflate": "", "lz4": "modprobe", "sha256": "lists lzo, deflate", "zstd": "not a compressor"} {
		err := checkCompressor(root, name)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
}
