package profiling

import (
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"
)

// Frame is one resolved stack frame.
type Frame struct {
	// Function is the (demangled) function name; empty when unknown.
	Function string
	// File is the source file, when known (callgrind's fl=).
	File string
	// Object is the shared object or executable holding the code.
	Object string
	// Address is the instruction address as the tool reported it (for perf,
	// the DSO-relative address; 0 when unknown).
	Address uint64
}

// name returns the function name to show: the symbol, or the object's base
// name in brackets when the frame has no symbol.
func (f Frame) name() string {
	if f.Function != "" && f.Function != "[unknown]" {
		return f.Function
	}
	if f.Object == "" || f.Object == "[unknown]" {
		return "[unknown]"
	}
	base := filepath.Base(f.Object)
	if strings.HasPrefix(base, "perf-") && strings.HasSuffix(base, ".map") {
		return "[JIT code]" // code generated at run time (oneDNN kernels), announced in /tmp/perf-PID.map
	}
	return "[" + base + "]"
}

// builder assembles a pprof profile, interning functions, mappings and
// locations and merging samples with equal stacks and labels.
type builder struct {
	p         *profile.Profile
	funcs     map[[2]string]*profile.Function // name, file
	maps      map[string]*profile.Mapping
	locs      map[locKey]*profile.Location
	samples   map[string]*profile.Sample
	byAddress bool // key locations by address (perf) or by function (callgrind)
}

type locKey struct {
	object, name string
	addr         uint64
}

func newBuilder(types []*profile.ValueType, byAddress bool) *builder {
	return &builder{
		p:         &profile.Profile{SampleType: types},
		funcs:     map[[2]string]*profile.Function{},
		maps:      map[string]*profile.Mapping{},
		locs:      map[locKey]*profile.Location{},
		samples:   map[string]*profile.Sample{},
		byAddress: byAddress,
	}
}

func (b *builder) function(name, file string) *profile.Function {
	k := [2]string{name, file}
	if f, ok := b.funcs[k]; ok {
		return f
	}
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name, Filename: file}
	b.p.Function = append(b.p.Function, f)
	b.funcs[k] = f
	return f
}

// mapping returns the mapping of an object. Mappings start at 0 so that a
// location's address reads as the tool's object-relative address; Limit is
// raised to cover every address seen.
func (b *builder) mapping(object string) *profile.Mapping {
	if object == "" {
		object = "[unknown]"
	}
	if m, ok := b.maps[object]; ok {
		return m
	}
	m := &profile.Mapping{ID: uint64(len(b.p.Mapping) + 1), File: object, HasFunctions: true}
	b.p.Mapping = append(b.p.Mapping, m)
	b.maps[object] = m
	return m
}

func (b *builder) location(fr Frame) *profile.Location {
	name := fr.name()
	k := locKey{object: fr.Object, name: name}
	if b.byAddress {
		k.addr = fr.Address
	}
	if l, ok := b.locs[k]; ok {
		return l
	}
	m := b.mapping(fr.Object)
	if fr.Address >= m.Limit {
		m.Limit = fr.Address + 1
	}
	l := &profile.Location{
		ID:      uint64(len(b.p.Location) + 1),
		Mapping: m,
		Address: k.addr,
		Line:    []profile.Line{{Function: b.function(name, fr.File)}},
	}
	b.p.Location = append(b.p.Location, l)
	b.locs[k] = l
	return l
}

// add adds values to the sample of the stack (leaf first) and labels,
// creating it when new.
func (b *builder) add(stack []Frame, values []int64, labels map[string]string) {
	locs := make([]*profile.Location, len(stack))
	var key strings.Builder
	for i, fr := range stack {
		locs[i] = b.location(fr)
		key.WriteString(strconv.FormatUint(locs[i].ID, 36))
		key.WriteByte(',')
	}
	var lab map[string][]string
	if len(labels) > 0 {
		lab = make(map[string][]string, len(labels))
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			lab[k] = []string{labels[k]}
			key.WriteString("\x00" + k + "=" + labels[k])
		}
	}
	s, ok := b.samples[key.String()]
	if !ok {
		s = &profile.Sample{Location: locs, Value: make([]int64, len(b.p.SampleType)), Label: lab}
		b.p.Sample = append(b.p.Sample, s)
		b.samples[key.String()] = s
	}
	for i, v := range values {
		s.Value[i] += v
	}
}
