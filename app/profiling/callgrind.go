package profiling

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Callgraph is the content of a callgrind output file: the cost of every
// function (self) and of every call edge (inclusive), per event.
type Callgraph struct {
	// Events names the cost columns, e.g. ["Ir"] (instructions executed).
	Events []string
	// Cmd is the profiled command line.
	Cmd string
	// Funcs holds every function, in order of first appearance.
	Funcs []*CGFunc
	// Totals is the file's "totals:" (or "summary:") line; nil if absent.
	Totals []int64

	index map[[2]string]*CGFunc // object, name
}

// CGFunc is one function of a Callgraph.
type CGFunc struct {
	Name   string
	File   string
	Object string
	// Self is the function's exclusive cost, per event.
	Self []int64
	// Calls are its outgoing call edges, one per callee.
	Calls []*CGCall
	// CalledBy are its incoming edges (the same values as the callers' Calls).
	CalledBy []*CGCall
}

// CGCall is a caller -> callee edge.
type CGCall struct {
	Caller, Callee *CGFunc
	// Count is the number of calls.
	Count int64
	// Inclusive is the cost spent inside the callee (and what it called)
	// on behalf of this caller, per event.
	Inclusive []int64
}

// Inclusive returns the function's inclusive cost of event e: self plus
// the inclusive cost of its calls to other functions.
func (f *CGFunc) Inclusive(e int) int64 {
	v := f.Self[e]
	for _, c := range f.Calls {
		if c.Callee != f {
			v += c.Inclusive[e]
		}
	}
	return v
}

// CallCount returns the number of calls made to the function.
func (f *CGFunc) CallCount() int64 {
	var n int64
	for _, c := range f.CalledBy {
		n += c.Count
	}
	return n
}

// ParseCallgrind reads a callgrind output file (format version 1, as
// written by valgrind --tool=callgrind): name compression "(id) name" for
// ob/fl/fi/fe/fn and their call-target forms, position compression
// ("+n", "-n", "*"), "positions: line" or "instr line", any number of
// events, and several parts (their costs add up). Jump lines are ignored.
func ParseCallgrind(r io.Reader) (*Callgraph, error) {
	p := cgParser{
		g:     &Callgraph{index: map[[2]string]*CGFunc{}},
		names: map[string]map[string]string{"ob": {}, "fl": {}, "fn": {}},
		npos:  1,
		edges: map[[2]*CGFunc]*CGCall{},
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		p.line++
		if err := p.parseLine(sc.Text()); err != nil {
			return nil, fmt.Errorf("callgrind line %d: %w", p.line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read callgrind output: %w", err)
	}
	if len(p.g.Events) == 0 {
		return nil, errors.New("callgrind output has no events: line (is it a callgrind.out file?)")
	}
	return p.g, nil
}

type cgParser struct {
	g    *Callgraph
	line int
	npos int // position columns per cost line

	// names maps compressed ids per name space: "ob" (ob, cob), "fl" (fl,
	// fi, fe, cfi, cfl) and "fn" (fn, cfn).
	names map[string]map[string]string

	ob, fl string
	fn     *CGFunc

	cob, cfi, cfn string // target of the next call
	callCount     int64
	inCall        bool // the next cost line is a call's inclusive cost

	edges map[[2]*CGFunc]*CGCall
}

var cgSpace = map[string]string{
	"ob": "ob", "cob": "ob",
	"fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl",
	"fn": "fn", "cfn": "fn",
}

func (p *cgParser) parseLine(line string) error {
	if line == "" || line[0] == '#' {
		return nil
	}
	if c := line[0]; c >= '0' && c <= '9' || c == '+' || c == '-' || c == '*' {
		return p.cost(line)
	}
	if key, val, ok := strings.Cut(line, "="); ok && !strings.Contains(key, ":") && !strings.Contains(key, " ") {
		return p.assign(key, val)
	}
	key, val, ok := strings.Cut(line, ":")
	if !ok {
		return fmt.Errorf("unrecognised line %q", line)
	}
	val = strings.TrimSpace(val)
	switch key {
	case "events":
		p.g.Events = strings.Fields(val)
	case "positions":
		p.npos = len(strings.Fields(val))
		if p.npos == 0 {
			return errors.New("empty positions: line")
		}
	case "cmd":
		p.g.Cmd = val
	case "totals", "summary":
		if key == "summary" && p.g.Totals != nil {
			return nil
		}
		var tot []int64
		for _, f := range strings.Fields(val) {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: %q is not a number", key, f)
			}
			tot = append(tot, v)
		}
		p.g.Totals = tot
	}
	// version, creator, pid, part, desc, event, thread, ...: nothing to keep.
	return nil
}

// resolve expands name compression in space: "(id) name" defines id,
// "(id)" refers to it.
func (p *cgParser) resolve(space, val string) (string, error) {
	val = strings.TrimSpace(val)
	if !strings.HasPrefix(val, "(") {
		return val, nil
	}
	end := strings.IndexByte(val, ')')
	if end < 0 {
		return "", fmt.Errorf("unterminated name id in %q", val)
	}
	id, name := val[1:end], strings.TrimSpace(val[end+1:])
	table := p.names[space]
	if name != "" {
		table[id] = name
		return name, nil
	}
	name, ok := table[id]
	if !ok {
		return "", fmt.Errorf("name id (%s) used before it was defined", id)
	}
	return name, nil
}

func (p *cgParser) assign(key, val string) error {
	switch key {
	case "calls":
		f := strings.Fields(val)
		if len(f) == 0 {
			return errors.New("calls= without a count")
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return fmt.Errorf("calls=%s: bad count", val)
		}
		if p.cfn == "" {
			return errors.New("calls= without a preceding cfn=")
		}
		p.callCount, p.inCall = n, true
		return nil
	case "jump", "jcnd", "jfi":
		return nil
	}
	space, ok := cgSpace[key]
	if !ok {
		return nil // unknown keys are skipped, as the format allows
	}
	name, err := p.resolve(space, val)
	if err != nil {
		return fmt.Errorf("%s=: %w", key, err)
	}
	switch key {
	case "ob":
		p.ob = name
	case "fl":
		p.fl = name
	case "fn":
		if len(p.g.Events) == 0 {
			return errors.New("fn= before the events: line")
		}
		p.fn = p.function(p.ob, name, p.fl)
		p.cob, p.cfi, p.cfn, p.inCall = "", "", "", false
	case "cob":
		p.cob = name
	case "cfi", "cfl":
		p.cfi = name
	case "cfn":
		p.cfn = name
	}
	return nil
}

func (p *cgParser) function(object, name, file string) *CGFunc {
	k := [2]string{object, name}
	if f, ok := p.g.index[k]; ok {
		if f.File == "" {
			f.File = file
		}
		return f
	}
	f := &CGFunc{Name: name, File: file, Object: object, Self: make([]int64, len(p.g.Events))}
	p.g.index[k] = f
	p.g.Funcs = append(p.g.Funcs, f)
	return f
}

// cost parses a cost line: npos positions, then one value per event.
func (p *cgParser) cost(line string) error {
	fields := strings.Fields(line)
	if len(fields) < p.npos {
		return fmt.Errorf("cost line %q has fewer than %d position columns", line, p.npos)
	}
	vals := make([]int64, len(p.g.Events))
	for i, f := range fields[p.npos:] {
		if i >= len(vals) {
			return fmt.Errorf("cost line %q has more values than events (%d)", line, len(vals))
		}
		v, err := strconv.ParseInt(f, 0, 64)
		if err != nil {
			return fmt.Errorf("cost line %q: %q is not a number", line, f)
		}
		vals[i] = v
	}
	if p.fn == nil {
		return errors.New("cost line before any fn=")
	}
	if p.inCall {
		obj, file := p.cob, p.cfi
		if obj == "" {
			obj = p.ob
		}
		callee := p.function(obj, p.cfn, file)
		p.addCall(p.fn, callee, p.callCount, vals)
		p.cob, p.cfi, p.cfn, p.inCall = "", "", "", false
		return nil
	}
	for i, v := range vals {
		p.fn.Self[i] += v
	}
	return nil
}

func (p *cgParser) addCall(caller, callee *CGFunc, count int64, incl []int64) {
	k := [2]*CGFunc{caller, callee}
	if c, ok := p.edges[k]; ok {
		c.Count += count
		for i, v := range incl {
			c.Inclusive[i] += v
		}
		return
	}
	c := &CGCall{Caller: caller, Callee: callee, Count: count, Inclusive: incl}
	p.edges[k] = c
	caller.Calls = append(caller.Calls, c)
	callee.CalledBy = append(callee.CalledBy, c)
}
