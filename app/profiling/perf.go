package profiling

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"
)

// PerfScriptFields is the -F list ParsePerfScript expects from
// `perf script` (other layouts with a "time: [period] event:" header and one
// "addr sym+off (dso)" line per frame parse too).
const PerfScriptFields = "comm,pid,tid,time,period,event,ip,sym,symoff,dso"

// headerTime finds the "  1234.567890: " timestamp of a sample header.
var headerTime = regexp.MustCompile(`\s(\d+\.\d+):(\s|$)`)

// PerfOptions tunes ParsePerfScript.
type PerfOptions struct {
	// From and To, when To > 0, keep only the samples whose timestamp
	// (seconds, the clock perf recorded with) lies in [From, To].
	From, To float64
}

// perfSample is one sample of `perf script` output.
type perfSample struct {
	comm   string
	tid    string
	time   float64
	period int64
	event  string
	stack  []Frame // leaf first
}

// ParsePerfScript reads `perf script` text (see PerfScriptFields) into a
// pprof profile: one sample per perf sample with the values
// [samples/count, EVENT/UNIT], where EVENT is the recorded event and UNIT is
// nanoseconds for the software clocks (cpu-clock, task-clock: a sample's
// period is the time it stands for) and count otherwise. Stacks are perf's
// call chains, leaf first; frames perf could not resolve at all (no symbol
// and no object, typically the bottom of a frame-pointer walk through code
// built without frame pointers) are dropped, and frames in a known object
// without a symbol become "[object]". Names that are still mangled
// (_Z...) are demangled with c++filt when it is installed. Samples carry
// the labels "thread" (the thread's name, comm) and "tid".
//
// Samples outside opt's time window are skipped.
func ParsePerfScript(r io.Reader, opt PerfOptions) (*profile.Profile, error) {
	var samples []perfSample
	var cur *perfSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			cur = nil
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if cur == nil {
				return nil, fmt.Errorf("perf script line %d: stack frame outside a sample: %q", lineNo, strings.TrimSpace(line))
			}
			fr, ok := parsePerfFrame(line)
			if !ok {
				return nil, fmt.Errorf("perf script line %d: not a stack frame: %q", lineNo, strings.TrimSpace(line))
			}
			cur.stack = append(cur.stack, fr)
			continue
		}
		s, err := parsePerfHeader(line)
		if err != nil {
			return nil, fmt.Errorf("perf script line %d: %w", lineNo, err)
		}
		samples = append(samples, s)
		cur = &samples[len(samples)-1]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read perf script: %w", err)
	}
	if opt.To > 0 {
		kept := samples[:0]
		for _, s := range samples {
			if s.time >= opt.From && s.time <= opt.To {
				kept = append(kept, s)
			}
		}
		samples = kept
	}
	return perfProfile(samples)
}

// parsePerfHeader parses "comm pid/tid [cpu] time: [period] event: [ip sym (dso)]".
func parsePerfHeader(line string) (perfSample, error) {
	loc := headerTime.FindStringSubmatchIndex(line)
	if loc == nil {
		return perfSample{}, fmt.Errorf("no timestamp in sample header %q (record with perf script -F %s)", line, PerfScriptFields)
	}
	var s perfSample
	pre := strings.Fields(line[:loc[0]])
	// Drop "[cpu]", then the pid/tid field; the rest is the thread name.
	if n := len(pre); n > 1 && strings.HasPrefix(pre[n-1], "[") {
		pre = pre[:n-1]
	}
	if n := len(pre); n > 1 && isPidTid(pre[n-1]) {
		ids := strings.Split(pre[n-1], "/")
		s.tid = ids[len(ids)-1]
		pre = pre[:n-1]
	}
	s.comm = strings.Join(pre, " ")
	s.time, _ = strconv.ParseFloat(line[loc[2]:loc[3]], 64)
	rest := strings.Fields(line[loc[1]:])
	if len(rest) > 0 {
		if v, err := strconv.ParseInt(rest[0], 10, 64); err == nil {
			s.period = v
			rest = rest[1:]
		}
	}
	if len(rest) == 0 || !strings.HasSuffix(rest[0], ":") {
		return perfSample{}, fmt.Errorf("no event name in sample header %q", line)
	}
	s.event = strings.TrimSuffix(rest[0], ":")
	if i := strings.IndexByte(s.event, ':'); i > 0 { // cpu-clock:u -> cpu-clock
		s.event = s.event[:i]
	}
	if len(rest) > 1 { // no call chain: the sampled ip is on the header line
		if fr, ok := parsePerfFrame(strings.Join(rest[1:], " ")); ok {
			s.stack = append(s.stack, fr)
		}
	}
	return s, nil
}

func isPidTid(s string) bool {
	for _, part := range strings.Split(s, "/") {
		if _, err := strconv.Atoi(part); err != nil {
			return false
		}
	}
	return true
}

// parsePerfFrame parses "  7f12ab sym+0x1c (/usr/lib/libfoo.so)".
func parsePerfFrame(line string) (Frame, bool) {
	line = strings.TrimSpace(line)
	addrText, rest, _ := strings.Cut(line, " ")
	addr, err := strconv.ParseUint(addrText, 16, 64)
	if err != nil {
		return Frame{}, false
	}
	rest = strings.TrimSpace(rest)
	var fr Frame
	fr.Address = addr
	if strings.HasSuffix(rest, ")") {
		if i := strings.LastIndex(rest, " ("); i >= 0 {
			fr.Object = rest[i+2 : len(rest)-1]
			rest = rest[:i]
		} else if strings.HasPrefix(rest, "(") {
			fr.Object = rest[1 : len(rest)-1]
			rest = ""
		}
	}
	fr.Function = stripOffset(strings.TrimSpace(rest))
	return fr, true
}

// stripOffset removes a trailing "+0x1f" symbol offset.
func stripOffset(sym string) string {
	i := strings.LastIndex(sym, "+0x")
	if i <= 0 {
		return sym
	}
	if _, err := strconv.ParseUint(sym[i+3:], 16, 64); err != nil {
		return sym
	}
	return sym[:i]
}

// perfProfile builds the profile of parsed samples.
func perfProfile(samples []perfSample) (*profile.Profile, error) {
	event := "cpu-clock"
	var events []string
	for _, s := range samples {
		if !slices.Contains(events, s.event) {
			events = append(events, s.event)
		}
	}
	if len(events) > 1 {
		return nil, fmt.Errorf("perf script holds several events (%s): record one (-e cpu-clock)", strings.Join(events, ", "))
	}
	if len(events) == 1 {
		event = events[0]
	}
	unit := "count"
	if event == "cpu-clock" || event == "task-clock" {
		unit = "nanoseconds"
	}
	b := newBuilder([]*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: event, Unit: unit}}, true)
	b.p.PeriodType = &profile.ValueType{Type: event, Unit: unit}
	b.p.DefaultSampleType = event

	var mangled []*string
	for i := range samples {
		for j := range samples[i].stack {
			mangled = append(mangled, &samples[i].stack[j].Function)
		}
	}
	demangle(mangled)
	periods := map[int64]int{}
	for _, s := range samples {
		stack := resolveInlined(s.stack)
		b.add(stack, []int64{1, s.period}, map[string]string{"thread": s.comm, "tid": s.tid})
		periods[s.period]++
	}
	for p, n := range periods { // the most common period, the largest on ties
		if n > periods[b.p.Period] || n == periods[b.p.Period] && p > b.p.Period {
			b.p.Period = p
		}
	}
	b.p.Comments = append(b.p.Comments, "source: perf script")
	return b.p, b.p.CheckValid()
}

// resolveInlined drops unresolvable frames and gives "(inlined)" frames
// (perf script --inline) the object of a physical frame at the same
// address, when the chain has one.
func resolveInlined(in []Frame) []Frame {
	out := make([]Frame, 0, len(in))
	for _, fr := range in {
		unknownSym := fr.Function == "" || fr.Function == "[unknown]"
		if unknownSym && (fr.Object == "" || fr.Object == "[unknown]") {
			continue
		}
		if fr.Object == "inlined" {
			fr.Object = ""
			for _, o := range in {
				if o.Address == fr.Address && o.Object != "inlined" {
					fr.Object = o.Object
					break
				}
			}
		}
		out = append(out, fr)
	}
	return out
}
