package runtime

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ovtoolkit/ovrun/internal/procfs"
	"github.com/ovtoolkit/ovrun/ladder"
	"github.com/ovtoolkit/ovrun/model"
)

// Limits on what a command may ask for, checked before any work so that an
// absurd number is a one-line error instead of an allocation failure deep in
// Go or OpenVINO.
const (
	// MaxCapacity is the largest context capacity (and token count) accepted.
	MaxCapacity = ladder.MaxCapacity
	// MaxNice is the largest nice value; 0 is the smallest a process may set
	// without privileges.
	MaxNice = 19
	// maxCPU bounds CPU numbers (the kernel's default CPU_SETSIZE).
	maxCPU = 1024
)

// CheckNice requires a nice value in 0..19.
func CheckNice(flag string, n int) error {
	if n < 0 || n > MaxNice {
		return fmt.Errorf("--%s %d: want a nice value 0..%d (0 leaves the priority alone)", flag, n, MaxNice)
	}
	return nil
}

// ParseCPUList parses a CPU list such as "1", "2-3" or "0,2-3" given to
// --flag. Every CPU must be one this process may run on.
func ParseCPUList(flag, s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	allowed, err := AllowedCPUs()
	if err != nil {
		return nil, err
	}
	var out []int
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		loS, hiS, isRange := strings.Cut(strings.TrimSpace(part), "-")
		lo, err := cpuNumber(flag, loS)
		if err != nil {
			return nil, err
		}
		hi := lo
		if isRange {
			if hi, err = cpuNumber(flag, hiS); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, fmt.Errorf("--%s: range %q runs backwards", flag, part)
			}
		}
		for c := lo; c <= hi; c++ {
			if !allowed[c] {
				return nil, fmt.Errorf("--%s: CPU %d is not available to this process (available: %s)", flag, c, cpuRanges(allowed))
			}
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	return out, nil
}

func cpuNumber(flag, s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--%s: %q is not a CPU number", flag, s)
	}
	if n >= maxCPU {
		return 0, fmt.Errorf("--%s: CPU %d is beyond the %d this tool can address", flag, n, maxCPU)
	}
	return n, nil
}

// AllowedCPUs is the process's CPU affinity set.
func AllowedCPUs() (map[int]bool, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read the CPU affinity: %w", err)
	}
	out := map[int]bool{}
	for c := range maxCPU {
		if set.IsSet(c) {
			out[c] = true
		}
	}
	return out, nil
}

// cpuRanges formats a CPU set as "0-3,6".
func cpuRanges(set map[int]bool) string {
	var parts []string
	for c := 0; c < maxCPU; c++ {
		if !set[c] {
			continue
		}
		end := c
		for end+1 < maxCPU && set[end+1] {
			end++
		}
		if end == c {
			parts = append(parts, strconv.Itoa(c))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", c, end))
		}
		c = end
	}
	return strings.Join(parts, ",")
}

// MemTotal is the machine's physical memory in bytes (MemTotal of
// /proc/meminfo), 0 when unknown.
func MemTotal() int64 { return procfs.KB("/proc/meminfo", "MemTotal:") }

// CheckMemory fails when need bytes (for what) exceed the machine's
// physical memory: such a request can only end in an allocation failure.
func CheckMemory(what string, need int64) error {
	total := MemTotal()
	if total > 0 && (need < 0 || need > total) {
		return fmt.Errorf("%s needs %s; this machine has %s", what, gib(need), gib(total))
	}
	return nil
}

// CheckCapacity checks a context capacity given to --flag: within
// MaxCapacity, and a KV cache of that size must fit in memory.
func CheckCapacity(flag string, capacity int, shape KVShape) error {
	if capacity < 1 || capacity > MaxCapacity {
		return fmt.Errorf("--%s %d: want 1..%d", flag, capacity, MaxCapacity)
	}
	return CheckMemory(fmt.Sprintf("--%s %d: the KV cache", flag, capacity), shape.BufferBytes(capacity))
}

func gib(n int64) string {
	if n < 0 {
		return "more bytes than an int64 holds"
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// MaxPrefillChunk bounds --prefill-chunk (tokens per prefill call).
const MaxPrefillChunk = 1 << 16

// CheckPrefillChunk checks a prefill chunk given to --flag for graphs of up
// to capacity slots: 0..MaxPrefillChunk, and the attention scores of one
// call, f32 [heads, chunk, capacity+chunk], must fit in memory.
func CheckPrefillChunk(flag string, chunk, capacity int, cfg *model.Config) error {
	if chunk < 0 || chunk > MaxPrefillChunk {
		return fmt.Errorf("--%s %d: want 0..%d", flag, chunk, MaxPrefillChunk)
	}
	scores := int64(cfg.NumAttentionHeads) * int64(chunk) * int64(capacity+chunk) * 4
	return CheckMemory(fmt.Sprintf("--%s %d: the attention scores of one prefill call", flag, chunk), scores)
}
