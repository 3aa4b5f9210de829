package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestVMStat(t *testing.T) {
	want := VMStat{
		PswpIn: 1001, PswpOut: 2002,
		PgpgIn: 4096, PgpgOut: 8192, // KiB, as in the file
		PgFault: 1478176, PgMajFault: 689,
		WorkingsetRefaultAnon: 11, WorkingsetRefaultFile: 12,
		WorkingsetActivateAnon: 21, WorkingsetActivateFile: 22,
		WorkingsetRestoreAnon: 31, WorkingsetRestoreFile: 32,
		PgStealAnon: 41, PgStealFile: 42,
		OOMKill: 3,
	}
	for _, path := range fixtures {
		t.Run(path, func(t *testing.T) {
			got, err := newTestFS(t, path).VMStat()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("VMStat() = %+v, want %+v", got, want)
			}
		})
	}
}

// A vmstat read empty or cut before pgfault is an error: its counters read
// as 0 would be a counter reset to Prometheus and a spike in a run's rates.
func TestVMStatEmptyOrCut(t *testing.T) {
	for name, content := range map[string]string{"empty": "", "cut": "nr_free_pages 792022\npswpin 7\n"} {
		root := writeTree(t, map[string]string{"vmstat": content})
		if _, err := newTestFS(t, root).VMStat(); err == nil || !strings.Contains(err.Error(), "no pgfault line") {
			t.Errorf("%s vmstat: %v, want an error", name, err)
		}
	}
}

func TestParseVMStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    VMStat
		wantErr string // substring of the error; empty for success
	}{
		{name: "empty", in: ""},
		{name: "unknown keys only", in: "nr_free_pages 792022\nnuma_hit 1311982\n"},
		{
			name: "missing keys stay zero",
			in:   "nr_free_pages 792022\npswpin 7\npgmajfault 9\n",
			want: VMStat{PswpIn: 7, PgMajFault: 9},
		},
		{
			name: "no trailing newline",
			in:   "oom_kill 2",
			want: VMStat{OOMKill: 2},
		},
		{
			name: "blank lines",
			in:   "\npswpout 5\n\n",
			want: VMStat{PswpOut: 5},
		},
		{
			name: "max uint64",
			in:   "pgfault 18446744073709551615\n",
			want: VMStat{PgFault: 18446744073709551615},
		},
		{
			// Unknown counters are not ours to validate.
			name: "unknown key odd value",
			in:   "nr_future -1\npswpin 1\n",
			want: VMStat{PswpIn: 1},
		},
		{name: "missing value", in: "pswpin 1\npswpout\n", wantErr: "line 2"},
		{name: "extra field", in: "pswpin 1 2\n", wantErr: "line 1"},
		{name: "not a number", in: "nr_free_pages 1\npswpin 1\npgpgin 12k\n", wantErr: "line 3"},
		{name: "negative", in: "oom_kill -1\n", wantErr: "line 1"},
		{name: "overflow", in: "pgfault 18446744073709551616\n", wantErr: "line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseVMStat(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseVMStat() error = %v, want one naming %q", err, tt.wantErr)
				}
				if got != (VMStat{}) {
					t.Errorf("ParseVMStat() = %+v on error, want zero", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ParseVMStat() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzParseVMStat(f *testing.F) {
	fixture, err := os.ReadFile("testdata/proc/vmstat")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(fixture))
	f.Add("")
	f.Add("pswpin\n")
	f.Add("pswpin 1 2\n")
	f.Add("pgfault 18446744073709551616\n")
	f.Add("\x00 \xff\n\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseVMStat(strings.NewReader(in))
		if err != nil && got != (VMStat{}) {
			t.Errorf("ParseVMStat(%q) = %+v with error %v, want zero", in, got, err)
		}
		want, wantErr := referenceVMStat(in)
		if got != want || (err == nil) != (wantErr == nil) {
			t.Errorf("ParseVMStat(%q) = %+v, %v; by strings.Fields and strconv: %+v, %v", in, got, err, want, wantErr)
		}
	})
}

// referenceVMStat parses /proc/vmstat's lines with strings.Fields and
// strconv, as the parser's fields and numbers must read them.
func referenceVMStat(in string) (VMStat, error) {
	var v VMStat
	sc := bufio.NewScanner(strings.NewReader(in))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return VMStat{}, errors.New("not two fields")
		}
		dst := v.field([]byte(f[0]))
		if dst == nil {
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return VMStat{}, err
		}
		*dst = n
	}
	return v, sc.Err()
}

// BenchmarkParseVMStat parses the fixture's /proc/vmstat, as the sampler
// does once a sample.
func BenchmarkParseVMStat(b *testing.B) {
	fixture, err := os.ReadFile("testdata/proc/vmstat")
	if err != nil {
		b.Fatal(err)
	}
	r := bytes.NewReader(fixture)
	for b.Loop() {
		r.Reset(fixture)
		if _, _, err := parseVMStat(r); err != nil {
			b.Fatal(err)
		}
	}
}
