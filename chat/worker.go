package chat

import (
	"bufio"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/ardanlabs/jinja"
	"golang.org/x/sys/unix"

	"github.com/ovtoolkit/ovrun/internal/procfs"
)

// The worker is this same binary started again with workerEnv set. The
// check is in init, not in main, so that every binary that links the
// package can render: ovrun, and the test binaries of the packages that
// use it. It runs before any main: the worker never reaches ovrun's
// hugepages.Reexec or its command line.
const workerEnv = "OVRUN_TEMPLATE_WORKER"

func init() {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(serveWorker())
	}
}

// request is one job for a worker: compile Source under Key when it is
// set (the worker keeps it), then render when Render is set.
type request struct {
	Key                 string
	Source              string
	Render              bool
	Messages            []Message
	AddGenerationPrompt bool
	BOS, EOS            string
}

// response answers a request; the worker's first one says Ready.
type response struct {
	Ready    bool
	Compiled bool // the worker holds the request's template now
	Text     string
	Err      string // the template's own error (parse, raise_exception, ...)
	Limit    string // a key of limitKinds when a limit stopped the render
}

// parentPoll is how often a worker checks that its parent lives: one
// busy in a render does not see its standard input close.
const parentPoll = 100 * time.Millisecond

// serveWorker limits this process and answers requests from standard
// input until it closes; it returns the exit status. Requests and answers
// are gob, which keeps strings byte for byte (JSON would replace invalid
// UTF-8).
func serveWorker() int {
	if err := limitSelf(); err != nil {
		fmt.Fprintln(os.Stderr, "template worker:", err)
		return 1
	}
	parent := os.Getppid()
	go func() {
		for range time.Tick(parentPoll) {
			if os.Getppid() != parent {
				os.Exit(1)
			}
		}
	}()
	dec := gob.NewDecoder(bufio.NewReader(os.Stdin))
	w := bufio.NewWriter(os.Stdout)
	enc := gob.NewEncoder(w)
	send := func(r *response) bool { return enc.Encode(r) == nil && w.Flush() == nil }
	if !send(&response{Ready: true}) {
		return 1
	}
	cache := map[string]*jinja.Template{}
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			return 0 // the parent closed the pipe, or is gone
		}
		if !send(handle(cache, &req)) {
			return 0
		}
	}
}

// limitSelf sets the worker's limits on itself: the stack, and the
// address space as RLIMIT_AS over what the process holds now (a Go
// process reserves about a gigabyte of address space up front; the race
// detector's shadow memory needs some four times the heap on top).
func limitSelf() error {
	runtime.GOMAXPROCS(2) // renders are one goroutine; one more for the collector
	debug.SetMaxStack(MaxStackBytes)
	budget := int64(MaxMemoryBytes)
	if raceEnabled {
		budget *= 4
	}
	debug.SetMemoryLimit(budget / 2) // collect hard before the hard limit
	held := procfs.Status("self", "VmSize:")
	if held <= 0 {
		return errors.New("cannot read VmSize from /proc/self/status")
	}
	lim := uint64(held + budget)
	if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: lim, Max: lim}); err != nil {
		return fmt.Errorf("set RLIMIT_AS: %w", err)
	}
	return nil
}

// handle runs one request in the worker.
func handle(cache map[string]*jinja.Template, req *request) *response {
	t := cache[req.Key]
	if req.Source != "" {
		var err error
		if t, err = compile(req.Source); err != nil {
			return &response{Err: err.Error()}
		}
		cache[req.Key] = t
	}
	if t == nil {
		return &response{Err: "template worker: no template " + req.Key}
	}
	if !req.Render {
		return &response{Compiled: true}
	}
	text, limit, err := render(t, req)
	switch {
	case limit != "":
		return &response{Compiled: true, Limit: limit}
	case err != nil:
		return &response{Compiled: true, Err: err.Error()}
	}
	return &response{Compiled: true, Text: text}
}

// compile parses a template; a panic in the parser is an error.
func compile(src string) (t *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("parser panicked: %v", r)
		}
	}()
	return jinja.Compile(src)
}

// render renders a compiled template with the conversation, a range()
// that counts its items against MaxRangeItems (the template's data scope
// comes before the library's own globals), and the output limit. limit is
// the key of the limit that stopped it, if one did.
func render(t *jinja.Template, req *request) (text, limit string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("renderer panicked: %v", r)
		}
	}()
	msgs := make([]any, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	budget, exceeded := int64(MaxRangeItems), false
	data := map[string]jinja.Value{
		"messages":              jinja.FromGoValue(msgs),
		"add_generation_prompt": jinja.NewBool(req.AddGenerationPrompt),
		"bos_token":             jinja.NewString(req.BOS),
		"eos_token":             jinja.NewString(req.EOS),
		"range": jinja.NewCallable("range", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			v, err := boundedRange(args, &budget)
			exceeded = exceeded || errors.Is(err, errRange)
			return v, err
		}),
	}
	text, err = t.RenderValues(data)
	switch {
	case exceeded:
		return "", "range", nil
	case err != nil:
		return "", "", err
	case len(text) > MaxOutputBytes:
		return "", "output", nil
	}
	return text, "", nil
}

// boundedRange is Jinja's range(stop), range(start, stop[, step]) over
// integers, taking its length from *budget first.
func boundedRange(args []jinja.Value, budget *int64) (jinja.Value, error) {
	var start, stop, step int64 = 0, 0, 1
	switch len(args) {
	case 1:
		stop = toInt(args[0])
	case 2, 3:
		start, stop = toInt(args[0]), toInt(args[1])
		if len(args) == 3 {
			step = toInt(args[2])
		}
	default:
		return jinja.Undefined(), fmt.Errorf("range: expected 1-3 arguments, got %d", len(args))
	}
	if step == 0 {
		return jinja.Undefined(), errors.New("range: step must not be zero")
	}
	n := rangeLen(start, stop, step)
	if n > uint64(*budget) {
		return jinja.Undefined(), errRange
	}
	*budget -= int64(n)
	items := make([]jinja.Value, n)
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step) // inside [start, stop): no overflow
	}
	return jinja.NewList(items), nil
}

// rangeLen is the number of items of range(start, stop, step), step != 0,
// computed without overflow.
func rangeLen(start, stop, step int64) uint64 {
	switch {
	case step > 0 && start < stop:
		return (uint64(stop)-uint64(start)-1)/uint64(step) + 1
	case step < 0 && start > stop:
		return (uint64(start)-uint64(stop)-1)/(0-uint64(step)) + 1
	}
	return 0
}

// toInt converts a range() argument as the library's own range does:
// floats truncated, booleans 0 or 1, strings by their leading integer.
func toInt(v jinja.Value) int64 {
	switch {
	case v.IsInt():
		return v.AsInt()
	case v.IsFloat():
		return int64(v.AsFloat())
	case v.IsBool():
		if v.AsBool() {
			return 1
		}
	case v.IsString():
		var n int64
		fmt.Sscanf(v.AsString(), "%d", &n)
		return n
	}
	return 0
}
