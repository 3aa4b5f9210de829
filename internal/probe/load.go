package probe

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// loadObjects loads the BPF objects of one way (the other's fields in
// objs stay nil). A kernel that refuses one of them (a verifier older than
// the code, a helper forced on a kernel without it) would refuse the whole
// collection, so then each map and each program is loaded on its own, the
// programs sharing the maps: whatever this kernel takes loads, and what it
// does not is returned by name with why. Its field in objs stays nil; the
// probe that needs it reports it down.
func loadObjects(objs *thrashscopeObjects, kernel *btf.Spec, way Way) (map[string]error, error) {
	spec, err := loadThrashscope()
	if err != nil {
		return nil, fmt.Errorf("reading the BPF objects: %w", err)
	}
	selectWay(spec, way)
	return loadObjectsFrom(spec, objs, kernel)
}

// loadObjectsFrom is loadObjects for a given spec.
func loadObjectsFrom(spec *ebpf.CollectionSpec, objs *thrashscopeObjects, kernel *btf.Spec) (map[string]error, error) {
	base := ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{KernelTypes: kernel}}
	if coll, err := ebpf.NewCollectionWithOptions(spec, base); err == nil {
		assign(objs, coll.Maps, coll.Programs, coll.Variables)
		return nil, nil
	}
	failed := map[string]error{}
	loaded := map[string]*ebpf.Map{}
	for _, name := range slices.Sorted(maps.Keys(spec.Maps)) {
		v, err := loadOne(spec, name, reflect.TypeFor[*ebpf.Map](), &base)
		if err != nil {
			failed[name] = refusal(err, spec.Maps[name].Type)
			continue
		}
		loaded[name] = v.(*ebpf.Map)
	}
	opts := &ebpf.CollectionOptions{MapReplacements: loaded, Programs: base.Programs}
	progs := map[string]*ebpf.Program{}
	for _, name := range slices.Sorted(maps.Keys(spec.Programs)) {
		if missing := missingMaps(spec.Programs[name], loaded); len(missing) > 0 {
			failed[name] = fmt.Errorf("it needs the map(s) %s, which did not load", strings.Join(missing, ", "))
			continue
		}
		v, err := loadOne(spec, name, reflect.TypeFor[*ebpf.Program](), opts)
		if err != nil {
			failed[name] = refusal(err, 0)
			continue
		}
		progs[name] = v.(*ebpf.Program)
	}
	vars := map[string]*ebpf.Variable{}
	for name := range spec.Variables {
		if v, err := loadOne(spec, name, reflect.TypeFor[*ebpf.Variable](), opts); err == nil {
			vars[name] = v.(*ebpf.Variable)
		}
	}
	assign(objs, loaded, progs, vars)
	if len(progs) == 0 {
		return failed, errors.New("no BPF program loads on this kernel")
	}
	return failed, nil
}

// loadOne loads the object name of the spec alone, through a struct of one
// field of type typ tagged with the name (what LoadAndAssign takes).
func loadOne(spec *ebpf.CollectionSpec, name string, typ reflect.Type, opts *ebpf.CollectionOptions) (any, error) {
	st := reflect.StructOf([]reflect.StructField{{Name: "X", Type: typ, Tag: reflect.StructTag(`ebpf:"` + name + `"`)}})
	v := reflect.New(st)
	if err := spec.LoadAndAssign(v.Interface(), opts); err != nil {
		return nil, err
	}
	return v.Elem().Field(0).Interface(), nil
}

// missingMaps are the maps a program refers to that did not load.
func missingMaps(p *ebpf.ProgramSpec, loaded map[string]*ebpf.Map) []string {
	var out []string
	for _, ref := range mapRefs(p) {
		if _, ok := loaded[ref]; !ok {
			out = append(out, ref)
		}
	}
	return out
}

// assign sets each field of objs tagged ebpf:"name" to the object of that
// name, leaving nil those that did not load.
func assign(objs *thrashscopeObjects, maps map[string]*ebpf.Map, progs map[string]*ebpf.Program, vars map[string]*ebpf.Variable) {
	for _, part := range []any{&objs.thrashscopePrograms, &objs.thrashscopeMaps, &objs.thrashscopeVariables} {
		v := reflect.ValueOf(part).Elem()
		for i := range v.NumField() {
			f, name := v.Field(i), v.Type().Field(i).Tag.Get("ebpf")
			switch {
			case name == "":
			case maps[name] != nil && f.Type() == reflect.TypeFor[*ebpf.Map]():
				f.Set(reflect.ValueOf(maps[name]))
			case progs[name] != nil && f.Type() == reflect.TypeFor[*ebpf.Program]():
				f.Set(reflect.ValueOf(progs[name]))
			case vars[name] != nil && f.Type() == reflect.TypeFor[*ebpf.Variable]():
				f.Set(reflect.ValueOf(vars[name]))
			}
		}
	}
}

// Since which Linux the kernel has the BPF helpers and map types the
// programs use that older kernels lack.
var (
	helperSince = map[asm.BuiltinFunc]string{
		asm.FnTaskStorageGet:    "5.11",
		asm.FnGetCurrentTaskBtf: "5.11",
		asm.FnFindVma:           "5.17",
		asm.FnProbeReadKernel:   "5.5",
		asm.FnRingbufOutput:     "5.8",
	}
	mapTypeSince = map[ebpf.MapType]string{ebpf.TaskStorage: "5.11", ebpf.RingBuf: "5.8"}
)

var unknownHelper = regexp.MustCompile(`invalid func unknown#(\d+)`)

// refusal says in one line why the kernel refused an object: the helper or
// map type it lacks, and the kernel that has it, else the verifier's last
// words.
func refusal(err error, mt ebpf.MapType) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		for _, line := range ve.Log {
			if m := unknownHelper.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseUint(m[1], 10, 32)
				fn := asm.BuiltinFunc(n) | asm.FnUnspec
				name := strings.TrimPrefix(fn.String(), "Fn")
				if since, ok := helperSince[fn]; ok {
					return fmt.Errorf("this kernel lacks the BPF helper %s (#%d, Linux %s+)", name, n, since)
				}
				return fmt.Errorf("this kernel lacks the BPF helper %s (#%d)", name, n)
			}
		}
		return explainLoadError(ve)
	}
	if since, ok := mapTypeSince[mt]; ok && errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("this kernel lacks the map type %s (Linux %s+): %w", mt, since, err)
	}
	return explainLoadError(err)
}
