package strictjson

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1,"b":{"c":[1,{"d":2}]}}`:            "",
		`{"a":1,"a":2}`:                            `"a" is given twice`,
		`{"spec":{"consumers":1,"consumers":512}}`: `"spec.consumers" is given twice`,
		`[{"x":1},{"x":1,"x":2}]`:                  `"[].x" is given twice`,
		`{"a":1} {}`:                               "trailing data",
		`{"a":`:                                    "unexpected end",
		`{"a" 1}`:                                  "not valid JSON",
		strings.Repeat("[", 100) + strings.Repeat("]", 100):                               "nested more than 64",
		`{"` + strings.Repeat("k", 70000) + `":1,"` + strings.Repeat("k", 70000) + `":2}`: "…",
	} {
		err := Check([]byte(in))
		switch {
		case want == "" && err != nil:
			t.Errorf("%.40s: %v, want no error", in, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%.40s: %v, want an error saying %s", in, err, want)
		case err != nil && len(err.Error()) > 200:
			t.Errorf("%.40s: the error echoes %d bytes of input", in, len(err.Error()))
		}
	}
}

func TestClip(t *testing.T) {
	if got := Clip("short"); got != "short" {
		t.Errorf("Clip(short) = %q", got)
	}
	long := strings.Repeat("é", 40) // 80 bytes: the cut falls inside a character
	if got := Clip(long); len(got) > 64+len("…") || !strings.HasSuffix(got, "…") || !json.Valid([]byte(`"`+got+`"`)) {
		t.Errorf("Clip(80 bytes) = %q", got)
	}
}

// FuzzCheck: whatever Check accepts is one valid JSON value that decodes
// without a repeated member; nothing panics or echoes much.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"preset":"e4","scale":0.1}`, `{"a":1,"a":2}`, `[[[]]]`, `{"a":{"b":[1,2,{"c":null}]}}`, `"x"`, `{`, `{"id":"x","consumers":[{"index":0}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Check(b)
		if err == nil && !json.Valid(b) {
			t.Fatalf("Check accepted invalid JSON %q", b)
		}
		if err != nil && len(err.Error()) > 400 {
			t.Fatalf("error of %d bytes: %.100s", len(err.Error()), err)
		}
		var v any
		if err == nil {
			if derr := Decode(b, &v); derr != nil {
				t.Fatalf("Decode failed where Check passed: %v", derr)
			}
		}
	})
}
