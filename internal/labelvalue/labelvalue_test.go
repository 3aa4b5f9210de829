package labelvalue

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"/system.slice/cron.service", "/system.slice/cron.service"},
		{`/system.slice/systemd-fsck@dev-disk-by\x2dlabel.service`, `/system.slice/systemd-fsck@dev-disk-by\x2dlabel.service`},
		{"/été", "/été"},
		{"/hostile-test-\x01", "/hostile-test-\uFFFD01"},
		{"/hostile-test-\xff", "/hostile-test-\uFFFDFF"},
		{"/hostile-test-\uFFFD", "/hostile-test-\uFFFDEF\uFFFDBF\uFFFDBD"},
		{"\x1b[31mred", "\uFFFD1B[31mred"},
		{"csi\u009b", "csi\uFFFDC2\uFFFD9B"},
		{"del\x7f", "del\uFFFD7F"},
		{"", ""},
	} {
		got := Escape(c.name)
		if got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.name, got, c.want)
		}
		if back, ok := Unescape(got); !ok || back != c.name {
			t.Errorf("Unescape(%q) = %q, %v; want %q", got, back, ok, c.name)
		}
	}
}

// Long siblings that once shared one clipped label, and names
// whose escapes pass the bound: each clipped value is its own.
func TestEscapeClips(t *testing.T) {
	long := "/" + strings.Repeat("a", 260)
	names := []string{long + "-one", long + "-two", long + strings.Repeat("\x01", 40), long + strings.Repeat("é", 40), strings.Repeat("\xff", 300)}
	seen := map[string]string{}
	for _, n := range names {
		v := Escape(n)
		if len(v) <= Max || len(v) > Max+35 || !strings.Contains(v, clipped) {
			t.Errorf("Escape(%q) = %q (%d bytes): want clipped, from %d to %d bytes", n, v, len(v), Max+1, Max+35)
		}
		if o, dup := seen[v]; dup {
			t.Errorf("%q and %q both give %q", o, n, v)
		}
		seen[v] = n
		if _, ok := Unescape(v); ok {
			t.Errorf("Unescape(%q) took a clipped value", v)
		}
	}
	if v := Escape(long[:Max]); v != long[:Max] {
		t.Errorf("a name of exactly %d plain bytes was changed: %q", Max, v)
	}
}

// Values Escape does not make are refused, so Unescape is a check too.
func TestUnescapeRefuses(t *testing.T) {
	for _, v := range []string{"a\uFFFD41", "a\uFFFD4", "a\uFFFDzz", "a\x01", "a\xff", "\uFFFDff"} {
		if name, ok := Unescape(v); ok {
			t.Errorf("Unescape(%q) = %q, want refused", v, name)
		}
	}
}

// FuzzEscape: every value is valid, printable and bounded; two names never
// give one value; a value within Max is its name's, reversed.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "/a", "/a\x01", "/a\xff", "/a\uFFFD", "/a\uFFFD01", strings.Repeat("x", 300), strings.Repeat("\xfe", 200), "\u009b", `\x2d`} {
		f.Add(s, s+"\x00")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		va, vb := Escape(a), Escape(b)
		for _, v := range []string{va, vb} {
			if !utf8.ValidString(v) || len(v) > Max+35 {
				t.Fatalf("Escape gave %q: invalid or over %d bytes", v, Max+35)
			}
			for _, r := range v {
				if r < 0x20 || (r >= 0x7f && r < 0xa0) {
					t.Fatalf("Escape gave %q, with control character %U", v, r)
				}
			}
		}
		if a != b && va == vb {
			t.Fatalf("Escape(%q) and Escape(%q) are both %q", a, b, va)
		}
		if len(va) <= Max {
			if back, ok := Unescape(va); !ok || back != a {
				t.Fatalf("Unescape(Escape(%q)) = %q, %v", a, back, ok)
			}
		}
	})
}
