// Package strictjson decodes JSON that comes from outside thrashscope (a
// run spec in a request body, a run record read back from the data dir) as
// input, not as trusted data: a name given twice in one object is an error,
// where encoding/json would silently keep the last value, and so is anything
// after the first value.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Decode checks b with Check, then decodes it into v.
func Decode(b []byte, v any) error {
	if err := Check(b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Check returns an error when b is not one JSON value, or when any object
// in it, at any depth, names a member twice. The error names the member by
// its path, e.g. `"spec.consumers" is given twice`.
func Check(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := value(dec, nil); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// MaxDepth bounds nesting, so a crafted body of a million brackets is
// refused before it costs a million frames.
const MaxDepth = 64

func value(dec *json.Decoder, path []string) error {
	if len(path) > MaxDepth {
		return fmt.Errorf("nested more than %d deep", MaxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return syntax(err)
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return syntax(err)
			}
			key, _ := k.(string)
			if seen[key] {
				return fmt.Errorf("%q is given twice: give each member once", Clip(strings.Join(append(path, key), ".")))
			}
			seen[key] = true
			if err := value(dec, append(path, key)); err != nil {
				return err
			}
		}
		_, err = dec.Token() // '}'
		return syntax(err)
	case json.Delim('['):
		for dec.More() {
			if err := value(dec, append(path, "[]")); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
		return syntax(err)
	}
	return nil
}

func syntax(err error) error {
	if err == nil {
		return nil
	}
	if err == io.EOF {
		return errors.New("unexpected end of JSON")
	}
	return fmt.Errorf("not valid JSON: %w", err)
}

// Clip keeps what an error echoes of untrusted input short: at most 64
// bytes, cut on a character boundary, with "…" when cut.
func Clip(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	return strings.ToValidUTF8(s[:most], "") + "…"
}
