package probe

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
)

func TestChooseWay(t *testing.T) {
	has := func() error { return nil }
	lacks := func() error { return fmt.Errorf("probing: %w", ebpf.ErrNotSupported) }
	broken := func() error { return errors.New("operation not permitted") }
	for _, tc := range []struct {
		name    string
		asked   Way
		needs   []fastNeed
		want    Way
		why     string
		wantErr string
	}{
		{"everything", WayAuto, []fastNeed{{"a", "5.11", has}, {"b", "5.17", has}}, WayFast, "has", ""},
		{"unset is auto", "", []fastNeed{{"a", "5.11", has}}, WayFast, "has", ""},
		{"5.10", WayAuto, []fastNeed{{"task storage", "5.11", lacks}, {"bpf_find_vma", "5.17", lacks}}, WayPortable,
			"lacks task storage (Linux 5.11+), bpf_find_vma (Linux 5.17+)", ""},
		{"5.15", WayAuto, []fastNeed{{"task storage", "5.11", has}, {"bpf_find_vma", "5.17", lacks}}, WayPortable,
			"lacks bpf_find_vma (Linux 5.17+)", ""},
		{"forced portable asks nothing", WayPortable, []fastNeed{{"a", "5.11", broken}}, WayPortable, "--probes.way", ""},
		{"forced fast asks nothing", WayFast, []fastNeed{{"a", "5.11", lacks}}, WayFast, "--probes.way", ""},
		{"a probe that fails otherwise is an error", WayAuto, []fastNeed{{"bpf_find_vma", "5.17", broken}}, "", "", "asking the kernel for bpf_find_vma: operation not permitted"},
		{"unknown", Way("slow"), nil, "", "", `unknown probe way "slow"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why, err := chooseWay(tc.asked, tc.needs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("chooseWay = %s, %q, %v; want %s, %q", got, why, err, tc.want, tc.why)
			}
		})
	}
}

func TestParseWay(t *testing.T) {
	for _, s := range []string{"auto", "fast", "portable"} {
		if w, err := ParseWay(s); err != nil || string(w) != s {
			t.Errorf("ParseWay(%q) = %q, %v", s, w, err)
		}
	}
	if _, err := ParseWay("kprobe"); err == nil || !strings.Contains(err.Error(), "--probes.way") {
		t.Errorf("ParseWay(kprobe) = %v, want an error naming the flag", err)
	}
}

// Each way leaves every program under its own name, built that way, and no
// map only the other way uses: the portable way must not ask a 5.10 kernel
// for task storage, nor the fast way carry the portable hash.
func TestSelectWay(t *testing.T) {
	for _, tc := range []struct {
		way     Way
		dropped []string // maps
		kept    []string
		helper  asm.BuiltinFunc // every program but cgroup_rmdir calls it, if set
		never   []asm.BuiltinFunc
	}{
		{WayFast, []string{"fault_threads", "maple_nodes"}, []string{"fault_tasks"}, asm.FnGetCurrentTaskBtf,
			[]asm.BuiltinFunc{asm.FnGetCurrentTask}},
		{WayPortable, []string{"fault_tasks"}, []string{"fault_threads", "maple_nodes"}, asm.FnUnspec,
			[]asm.BuiltinFunc{asm.FnGetCurrentTaskBtf, asm.FnTaskStorageGet, asm.FnTaskStorageDelete, asm.FnFindVma}},
	} {
		t.Run(string(tc.way), func(t *testing.T) {
			spec, err := loadThrashscope()
			if err != nil {
				t.Fatal(err)
			}
			all, _ := loadThrashscope()
			selectWay(spec, tc.way)
			for name, p := range spec.Programs {
				if strings.HasSuffix(name, portableSuffix) {
					t.Errorf("program %s left in", name)
				}
				if p.Name != name && !strings.HasPrefix(name, p.Name) {
					t.Errorf("program %s loads as %q", name, p.Name)
				}
				// Tools read a long name from the BTF function: it must not
				// say the way.
				if fn := btf.FuncMetadata(&p.Instructions[0]); fn == nil || fn.Name != name || p.Instructions[0].Symbol() != name {
					t.Errorf("program %s: function %v, symbol %q", name, fn, p.Instructions[0].Symbol())
				}
				want := all.Programs[name]
				if tc.way == WayPortable && all.Programs[name+portableSuffix] != nil {
					want = all.Programs[name+portableSuffix]
				}
				if len(p.Instructions) != len(want.Instructions) {
					t.Errorf("program %s has %d instructions, want the %s build's %d", name, len(p.Instructions), tc.way, len(want.Instructions))
				}
				calls := helpers(p)
				for _, fn := range tc.never {
					if slices.Contains(calls, fn) {
						t.Errorf("program %s of the %s way calls %s", name, tc.way, fn)
					}
				}
				if tc.helper != asm.FnUnspec && name != "cgroup_rmdir" && !slices.Contains(calls, tc.helper) {
					t.Errorf("program %s of the %s way does not call %s: %v", name, tc.way, tc.helper, calls)
				}
			}
			if len(spec.Programs)*2-1 != len(all.Programs) {
				t.Errorf("%d programs left of %d", len(spec.Programs), len(all.Programs))
			}
			for _, m := range tc.dropped {
				if spec.Maps[m] != nil {
					t.Errorf("map %s left in", m)
				}
			}
			for _, m := range tc.kept {
				if spec.Maps[m] == nil {
					t.Errorf("map %s dropped", m)
				}
			}
		})
	}
}

// helpers are the BPF helpers a program calls.
func helpers(p *ebpf.ProgramSpec) []asm.BuiltinFunc {
	var out []asm.BuiltinFunc
	for _, ins := range p.Instructions {
		if ins.IsBuiltinCall() {
			out = append(out, asm.BuiltinFunc(ins.Constant))
		}
	}
	return out
}
