package chat

import (
	"fmt"
	"strings"
	"time"
)

// A chat template is code that came with the model file: it is compiled and
// rendered in a sandbox worker process (see worker.go and pool.go) under
// these limits, which no real template comes near.
const (
	// MaxTemplateBytes bounds the template source a model may carry.
	MaxTemplateBytes = 1 << 20
	// RenderTimeout bounds one compile or one render.
	RenderTimeout = 2 * time.Second
	// MaxStackBytes bounds the renderer's stack: recursion (a macro that
	// calls itself, parentheses nested a million deep) stops there, some
	// 20,000 macro calls deep.
	MaxStackBytes = 32 << 20
	// MaxMemoryBytes bounds the address space the worker may add to what
	// it holds when it starts; the resident set stays below it too.
	MaxMemoryBytes = 512 << 20
	// MaxOutputBytes bounds a rendered conversation.
	MaxOutputBytes = 16 << 20
	// MaxRangeItems bounds the items range() makes in one render, all
	// calls together: loops over range() end there.
	MaxRangeItems = 1_000_000
)

// workerStartTimeout bounds starting a worker process, apart from the
// render it is started for.
const workerStartTimeout = 10 * time.Second

// maxErrorBytes bounds the text of a template's own error (a template may
// raise_exception with a megabyte of text).
const maxErrorBytes = 512

// LimitError is a template stopped by one of the limits above.
type LimitError struct {
	What string // "recursion too deep (...)", "took longer than 2s", ...
}

func (e *LimitError) Error() string { return e.What }

var (
	errRecursion = &LimitError{fmt.Sprintf("recursion too deep (the renderer's stack passed %d MiB)", MaxStackBytes>>20)}
	errMemory    = &LimitError{fmt.Sprintf("out of memory (limit %d MiB)", MaxMemoryBytes>>20)}
	errTime      = &LimitError{fmt.Sprintf("took longer than %v", RenderTimeout)}
	errOutput    = &LimitError{fmt.Sprintf("output longer than %d bytes", MaxOutputBytes)}
	errRange     = &LimitError{fmt.Sprintf("loops too long (range() over more than %d items in all)", MaxRangeItems)}
)

// limitKinds names the limits the worker reports itself, for the wire.
var limitKinds = map[string]*LimitError{"output": errOutput, "range": errRange}

// crashLimit is the limit a worker that died with stderr ran into, or nil:
// the Go runtime's fatal errors for stack and memory, and the race
// detector's for memory.
func crashLimit(stderr string) *LimitError {
	switch {
	case strings.Contains(stderr, "goroutine stack exceeds"), strings.Contains(stderr, "fatal error: stack overflow"):
		return errRecursion
	case strings.Contains(stderr, "out of memory"), strings.Contains(stderr, "cannot allocate memory"),
		strings.Contains(stderr, "errno=12"), strings.Contains(stderr, "ThreadSanitizer failed to allocate"),
		strings.Contains(stderr, "address space collisions"):
		return errMemory
	}
	return nil
}

// oneLine is a template's own error text on one line, at most
// maxErrorBytes long.
func oneLine(s string) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' }), " ")
	if len(s) > maxErrorBytes {
		cut := maxErrorBytes
		for cut > 0 && s[cut]&0xC0 == 0x80 { // not inside a UTF-8 sequence
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}
