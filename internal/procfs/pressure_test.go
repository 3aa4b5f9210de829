package procfs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestMemoryPressure(t *testing.T) {
	got, err := newTestFS(t, "testdata/proc").MemoryPressure()
	if err != nil {
		t.Fatal(err)
	}
	want := Pressure{
		SomeTotal: 1234567 * time.Microsecond,
		FullTotal: 654321 * time.Microsecond,
		SomeAvg10: 12.34,
		FullAvg10: 8.90,
	}
	if got != want {
		t.Errorf("MemoryPressure() = %+v, want %+v", got, want)
	}
	if got.SomeTotal.Seconds() != 1.234567 {
		t.Errorf("SomeTotal = %v s, want 1.234567 s", got.SomeTotal.Seconds())
	}
}

func TestMemoryPressureNoPSI(t *testing.T) {
	_, err := newTestFS(t, "testdata/proc-nopsi").MemoryPressure()
	if !errors.Is(err, ErrNoData) {
		t.Fatalf("MemoryPressure() without /proc/pressure: got %v, want ErrNoData", err)
	}
}

func TestMemoryPressureContent(t *testing.T) {
	tests := []struct {
		name       string
		content    string
		want       Pressure
		wantErr    bool
		wantNoData bool
	}{
		{
			name:    "no full line",
			content: "some avg10=0.50 avg60=0.10 avg300=0.02 total=2000000\n",
			want:    Pressure{SomeTotal: 2 * time.Second, SomeAvg10: 0.5},
		},
		{
			name:    "zero",
			content: "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		},
		// The file is there (the kernel has PSI), its read came back
		// empty: a failed read, not "no PSI", so its series are not sent.
		{name: "empty", content: "", wantErr: true},
		{name: "malformed", content: "some avg10=x avg60=0.00 avg300=0.00 total=0\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := writeTree(t, map[string]string{"pressure/memory": tt.content})
			got, err := newTestFS(t, root).MemoryPressure()
			if (err != nil) != tt.wantErr || errors.Is(err, ErrNoData) != tt.wantNoData {
				t.Fatalf("MemoryPressure() error = %v, want error %v, ErrNoData %v", err, tt.wantErr, tt.wantNoData)
			}
			if got != tt.want {
				t.Errorf("MemoryPressure() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A psi=0 kernel may keep the file and fail the read; that cannot be put in
// a fixture tree, so check the classification directly.
func TestNoPSI(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&os.PathError{Op: "read", Path: "/proc/pressure/memory", Err: syscall.EOPNOTSUPP}, true},
		{fmt.Errorf("wrapped: %w", &os.PathError{Op: "open", Path: "x", Err: syscall.ENOENT}), true},
		{&os.PathError{Op: "read", Path: "x", Err: syscall.EACCES}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := noPSI(tt.err); got != tt.want {
			t.Errorf("noPSI(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
