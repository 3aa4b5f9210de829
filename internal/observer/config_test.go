package observer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thrashscope/thrashscope/internal/indicators"
)

func validConfig() Config {
	return Config{
		ListenAddresses: []string{"127.0.0.1:9752"},
		ProcfsPath:      "/proc",
		SysfsPath:       "/sys",
		Probes:          ProbesAuto,
		SampleInterval:  time.Second,
		TopK:            20,
		CgroupTopK:      20,
		WSSInterval:     time.Second,
		WSSPeriod:       5 * time.Second,
		Detector:        indicators.DefaultDetectorConfig(),
		FaultKind:       indicators.CountAnon,
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo") // no writer: a blocking open waits for one
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(dir, "linked") // as a Kubernetes secret mounts it
	if err := os.Symlink(token, linked); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, make([]byte, maxTokenBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		wantErr string // empty: valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"ipv6 loopback", func(c *Config) { c.ListenAddresses = []string{"[::1]:9752"} }, ""},
		{"localhost", func(c *Config) { c.ListenAddresses = []string{"localhost:9752"} }, ""},
		{"all interfaces without token", func(c *Config) { c.ListenAddresses = []string{":9752"} }, "listens beyond loopback"},
		{"public ip without token", func(c *Config) { c.ListenAddresses = []string{"10.0.0.5:9752"} }, "--web.api-token-file"},
		{"all interfaces with token", func(c *Config) { c.ListenAddresses = []string{"0.0.0.0:9752"}; c.APITokenFile = token }, ""},
		{"empty token", func(c *Config) { c.APITokenFile = empty }, "is empty"},
		{"huge token file", func(c *Config) { c.APITokenFile = huge }, "larger than 4096 bytes"},
		{"token file a FIFO", func(c *Config) { c.APITokenFile = fifo }, "is a named pipe, not a regular file"},
		{"token file a directory", func(c *Config) { c.APITokenFile = dir }, "is a directory, not a regular file"},
		{"token file a link to one", func(c *Config) { c.APITokenFile = linked }, ""},
		{"missing token file", func(c *Config) { c.APITokenFile = filepath.Join(dir, "nope") }, "--web.api-token-file"},
		{"host settings without a token", func(c *Config) { c.AllowHostSettings = true }, "--settings.allow-host-without-token"},
		{"host settings with a token", func(c *Config) { c.AllowHostSettings = true; c.APITokenFile = token }, ""},
		{"host settings on a lab host", func(c *Config) { c.AllowHostSettings, c.AllowHostWithoutToken = true, true }, ""},
		{"hostname", func(c *Config) { c.ListenAddresses = []string{"example.org:9752"} }, "not an IP address"},
		{"no port", func(c *Config) { c.ListenAddresses = []string{"127.0.0.1"} }, "--web.listen-address"},
		{"bad probes", func(c *Config) { c.Probes = "kprobe" }, "--probes"},
		{"bad probes way", func(c *Config) { c.ProbesWay = "slow" }, "--probes.way"},
		{"portable probes way", func(c *Config) { c.ProbesWay = "portable" }, ""},
		{"interval too short", func(c *Config) { c.SampleInterval = time.Millisecond }, "--sample.interval"},
		{"wss period below its interval", func(c *Config) { c.WSSPeriod = 500 * time.Millisecond }, "--wss.period"},
		{"wss period back to back", func(c *Config) { c.WSSPeriod = 0 }, ""},
		{"wss period too long", func(c *Config) { c.WSSPeriod = time.Hour }, "--wss.period"},
		{"top-k zero", func(c *Config) { c.TopK = 0 }, "--process.top-k"},
		{"top-k huge", func(c *Config) { c.TopK = 100000 }, "--process.top-k"},
		{"cgroup top-k off", func(c *Config) { c.CgroupTopK = 0 }, ""},
		{"cgroup top-k negative", func(c *Config) { c.CgroupTopK = -1 }, "--cgroup.top-k"},
		{"cgroup top-k huge", func(c *Config) { c.CgroupTopK = 5000 }, "--cgroup.top-k"},
		{"kubelet root", func(c *Config) { c.KubeletRoots = []string{"/", "/kubelet.slice"} }, ""},
		{"kubelet root relative", func(c *Config) { c.KubeletRoots = []string{"kubelet.slice"} }, "--cgroup.kubelet-root"},
		{"kubelet root climbing", func(c *Config) { c.KubeletRoots = []string{"/a/../b"} }, "--cgroup.kubelet-root"},
		{"cgroup depth negative", func(c *Config) { c.CgroupDepth = -2 }, "--cgroup.depth"},
		{"cgroupfs not a cgroup mount", func(c *Config) { c.CgroupfsPath = dir }, "--path.cgroupfs"},
		{"bad procfs", func(c *Config) { c.ProcfsPath = filepath.Join(dir, "nope") }, "--path.procfs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("want valid, got %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("want an error naming %q, got %v", tc.wantErr, err)
			}
		})
	}
}

// TestTokenFileExposed: a token file others can read or write is named,
// with its mode and the fix; one only its owner (and group) can read is not.
func TestTokenFileExposed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode os.FileMode
		want string
	}{{0o600, ""}, {0o640, ""}, {0o644, "mode 0644"}, {0o602, "mode 0602"}} {
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		got := TokenFileExposed(path)
		if tc.want == "" && got != "" || tc.want != "" && (!strings.Contains(got, tc.want) || !strings.Contains(got, "chmod 600")) {
			t.Errorf("mode %04o: %q, want %q", tc.mode, got, tc.want)
		}
	}
}
