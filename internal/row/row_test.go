package row

import (
	"reflect"
	"testing"
)

// HostColumns is Host's one declaration: each field exactly once, and each
// column named once, so samples.csv, the history and the live page carry
// every indicator Host holds.
func TestHostColumnsDeclareEveryField(t *testing.T) {
	typ := reflect.TypeFor[Host]()
	if typ.NumField() != HostFields {
		t.Fatalf("Host has %d fields, HostFields says %d", typ.NumField(), HostFields)
	}
	var h Host
	v := reflect.ValueOf(&h).Elem()
	fields, names := map[string]bool{}, map[string]bool{}
	for i, c := range HostColumns {
		*c.Field(&h) = float64(i + 1)
		if names[c.Name] {
			t.Errorf("column %s declared twice", c.Name)
		}
		names[c.Name] = true
	}
	for i := range typ.NumField() {
		got := v.Field(i).Float()
		if got == 0 {
			t.Errorf("field %s has no column", typ.Field(i).Name)
			continue
		}
		name := HostColumns[int(got)-1].Name
		if fields[name] {
			t.Errorf("column %s points at two fields", name)
		}
		fields[name] = true
	}
}
