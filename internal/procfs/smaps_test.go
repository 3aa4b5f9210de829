package procfs

import (
	"strings"
	"testing"
)

func TestParseSmaps(t *testing.T) {
	const kernel618 = `55a8ea1db000-7ffc1d4c1000 ---p 00000000 00:00 0                          [rollup]
Rss:                1676 kB
Pss:                 533 kB
Pss_Dirty:           116 kB
Pss_Anon:            116 kB
Pss_File:            417 kB
Pss_Shmem:             0 kB
Shared_Clean:       1472 kB
Shared_Dirty:          0 kB
Private_Clean:        88 kB
Private_Dirty:       116 kB
Referenced:         1676 kB
Anonymous:           116 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                 12 kB
SwapPss:               0 kB
Locked:                0 kB
`
	// Two mappings as Linux 6.18 prints them: a binary's text that 26
	// processes share, and a private anonymous region with some in swap.
	const twoMappings = `55d0c4a00000-55d0c4ce4000 r-xp 00000000 fe:00 1311                       /usr/bin/loadgen
Size:               2960 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                2960 kB
Pss:                 114 kB
Pss_Dirty:             0 kB
Shared_Clean:       2960 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:         0 kB
Referenced:         1480 kB
Anonymous:             0 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
THPeligible:           0
VmFlags: rd ex mr mw me sd 
7f2b54000000-7f2b54989000 rw-p 00000000 00:00 0 
Size:               9764 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                9664 kB
Pss:                9664 kB
Pss_Dirty:          9664 kB
Shared_Clean:          0 kB
Shared_Dirty:          0 kB
Private_Clean:         0 kB
Private_Dirty:      9664 kB
Referenced:         9664 kB
Anonymous:          9664 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                100 kB
SwapPss:             100 kB
Locked:                0 kB
THPeligible:           0
VmFlags: rd wr mr mw me ac sd 
`
	// A shared mapping of a file of 200 MiB, a page-cache thrash's: most
	// of it out to the file, neither resident nor in swap.
	const fileOut = `7f0000000000-7f000c800000 rw-s 00000000 fe:00 42                         /var/tmp/region (deleted)
Size:             204800 kB
Rss:               51200 kB
Pss:               51200 kB
Referenced:        40960 kB
Swap:                  0 kB
SwapPss:               0 kB
`
	// A binary's text, mostly never faulted in: a private mapping, not
	// counted as out.
	const textOut = `55d0c4a00000-55d0c4e00000 r-xp 00000000 fe:00 1312                       /usr/bin/observer
Size:               4096 kB
Rss:                1024 kB
Pss:                1024 kB
Referenced:          512 kB
Swap:                  0 kB
`
	tests := []struct {
		name    string
		in      string
		want    Smaps
		wantErr string
	}{
		{name: "linux 6.18 rollup", in: kernel618, want: Smaps{RSS: 1676 << 10, PSS: 533 << 10, Swap: 12 << 10, Referenced: 1676 << 10, OwnReferenced: 533 << 10}},
		// 1480 kB × 114/2960 = 57 kB of the text is this process's share.
		{name: "shared text and private anon", in: twoMappings, want: Smaps{RSS: 12624 << 10, PSS: 9778 << 10, Swap: 100 << 10, SwapPSS: 100 << 10, Referenced: 11144 << 10, OwnReferenced: (57 + 9664) << 10}},
		// The first text is all resident, the second private; the anon region
		// is no file's.
		{name: "file pages out", in: twoMappings + fileOut + textOut, want: Smaps{RSS: (12624 + 51200 + 1024) << 10, PSS: (9778 + 51200 + 1024) << 10, Swap: 100 << 10, SwapPSS: 100 << 10,
			Referenced: (11144 + 40960 + 512) << 10, OwnReferenced: (57 + 9664 + 40960 + 512) << 10, FileNotResident: (204800 - 51200) << 10}},
		{name: "no PSS: nothing shared", in: "Rss: 8 kB\nReferenced: 4 kB\n", want: Smaps{RSS: 8 << 10, PSS: 8 << 10, Referenced: 4 << 10, OwnReferenced: 4 << 10}},
		{name: "referenced not a number", in: strings.Replace(kernel618, "1676 kB\nAnon", "lots kB\nAnon", 1), wantErr: "bad Referenced line"},
		{name: "no unit", in: "Rss: 8\nReferenced: 4 kB\n", wantErr: "bad Rss line"},
		{name: "no referenced", in: "Rss: 8 kB\nSwap: 0 kB\n", wantErr: "no Rss or Referenced"},
		{name: "header only", in: "55a8ea1db000-7ffc1d4c1000 ---p 00000000 00:00 0 [rollup]\n", wantErr: "no Rss or Referenced"},
		{name: "empty", in: "", wantErr: "no Rss or Referenced"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSmaps([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A size past any address space is refused, not wrapped into a small one.
func TestParseSmapsRefusesWrappingSizes(t *testing.T) {
	if _, err := ParseSmaps([]byte("Rss: 18446744073709551615 kB\nReferenced: 4 kB\n")); err == nil {
		t.Error("an Rss of 2^64 kB parsed")
	}
}
