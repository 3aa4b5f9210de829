// Package labelvalue makes a name the kernel or a process chose (a cgroup
// path, a comm) a Prometheus label value that is printable, bounded, and
// one to one: two different names never give one value, so no two series
// of one scrape share their labels whatever the names.
//
// A name of printable UTF-8 that holds no U+FFFD and fits is its own value.
// Otherwise each byte that is not printable (a control character, C0 or
// C1, or a byte of invalid UTF-8) and each byte of a U+FFFD the name holds
// becomes U+FFFD followed by the byte in two hex digits: "a\x01" is
// "a\uFFFD01". That is reversed by Unescape. A value that would still be
// over Max bytes is clipped, marked "…" and followed by 32 hex digits of
// the whole name's SHA-256: such values are longer than Max, so none is
// another name's unclipped value.
package labelvalue

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// Max bounds a value that is not clipped; a clipped one is Max plus at
// most 35 bytes (the mark and the hash).
const Max = 256

const (
	escape  = '\uFFFD'
	clipped = "…"
	hashHex = 32
	hexDigs = "0123456789ABCDEF"
)

// Escape is name as a label value.
func Escape(name string) string {
	if plain(name) && len(name) <= Max {
		return name
	}
	var b strings.Builder
	b.Grow(min(len(name), Max) + 16)
	for i := 0; i < len(name); {
		start := b.Len() // an escape's or a rune's start: where a clip may cut
		r, size := utf8.DecodeRuneInString(name[i:])
		if printable(r, size) {
			b.WriteString(name[i : i+size])
		} else {
			for _, c := range []byte(name[i : i+size]) {
				b.WriteRune(escape)
				b.WriteByte(hexDigs[c>>4])
				b.WriteByte(hexDigs[c&0xf])
			}
		}
		if b.Len() > Max {
			sum := sha256.Sum256([]byte(name))
			return b.String()[:start] + clipped + hex.EncodeToString(sum[:hashHex/2])
		}
		i += size
	}
	return b.String()
}

// Unescape is the name a value that was not clipped came from; ok is false
// for a clipped value or one Escape does not make.
func Unescape(v string) (name string, ok bool) {
	if len(v) > Max {
		return "", false
	}
	if !strings.ContainsRune(v, escape) {
		return v, plain(v)
	}
	var b []byte
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRuneInString(v[i:])
		if r != escape || size != 3 {
			b = append(b, v[i:i+size]...)
			i += size
			continue
		}
		if i+5 > len(v) {
			return "", false
		}
		c, err := hex.DecodeString(v[i+3 : i+5])
		if err != nil {
			return "", false
		}
		b = append(b, c[0])
		i += 5
	}
	// Only the form Escape makes: "\uFFFD41" is not how it writes "A".
	return string(b), Escape(string(b)) == v
}

// plain is whether every rune of s is printable, a U+FFFD excepted.
func plain(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !printable(r, size) {
			return false
		}
		i += size
	}
	return true
}

// printable is whether a decoded rune is kept as it is: valid UTF-8, not a
// C0 or C1 control character (a terminal acts on some, ESC and CSI), and
// not U+FFFD (the escape).
func printable(r rune, size int) bool {
	switch {
	case r == utf8.RuneError: // an invalid byte (size 1), or U+FFFD itself
		return false
	case r < 0x20, r >= 0x7f && r < 0xa0:
		return false
	}
	return size > 0
}
