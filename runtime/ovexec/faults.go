package ovexec

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/ovtoolkit/ovrun/model"
)

// faultPlan injects compile failures (see FailCompileEnv).
type faultPlan struct {
	mu       sync.Mutex
	capacity int
	left     int
}

func parseFaultPlan(s string) (*faultPlan, error) {
	if s == "" {
		return nil, nil
	}
	c, n, hasN := strings.Cut(s, "x")
	capacity, err := strconv.Atoi(c)
	left := 1
	if err == nil && hasN {
		left, err = strconv.Atoi(n)
	}
	if err != nil || capacity <= 0 || left < 0 {
		return nil, fmt.Errorf("%s=%q: want CAPACITY or CAPACITYxCOUNT", FailCompileEnv, s)
	}
	return &faultPlan{capacity: capacity, left: left}, nil
}

// injectedFailure is the error of a compile that FailCompileEnv fails, nil
// for the others.
func (c *Compiler) injectedFailure(spec model.GraphSpec) error {
	if c.faults.fire(spec) {
		return fmt.Errorf("compile graph %s on %s: injected failure (%s)", spec.Name(), c.opts.Device, FailCompileEnv)
	}
	return nil
}

// fire reports whether this compile should fail, consuming one failure.
func (f *faultPlan) fire(spec model.GraphSpec) bool {
	if f == nil || (spec.Chunk != 1 && spec.Batch == 0) || spec.Capacity != f.capacity {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.left == 0 {
		return false
	}
	f.left--
	return true
}
