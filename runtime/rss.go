package runtime

import (
	"os"
	"runtime/metrics"
	"strings"

	"github.com/ovtoolkit/ovrun/internal/procfs"
)

// PeakRSS is the process's peak resident set size in bytes (VmHWM), 0 when
// /proc is unavailable.
func PeakRSS() int64 { return procfs.Status("self", "VmHWM:") }

// CurrentRSS is the process's resident set size in bytes (VmRSS).
func CurrentRSS() int64 { return procfs.Status("self", "VmRSS:") }

// Region is an address range the caller owns, e.g. the weights blob.
type Region struct {
	Start, Len uintptr
}

// MemoryParts is where the resident memory of this process is, in bytes
// (generate --json "memory"): what the caller's weights blob has resident
// (its converted weights and the checkpoint's pages it maps), the KV cache
// the caller counts, Go's heap, the program and shared libraries (file
// pages: OpenVINO's code mostly), and the rest of the anonymous memory:
// OpenVINO's own allocations, the compiled graphs' weights in the plugin's
// layouts above all. RSS is their sum, up to the stacks and small
// mappings "other" holds.
type MemoryParts struct {
	RSS       int64 `json:"rss_bytes"`
	PeakRSS   int64 `json:"peak_rss_bytes"`
	Weights   int64 `json:"weights_bytes"`
	KV        int64 `json:"kv_bytes"`
	GoHeap    int64 `json:"go_heap_bytes"`
	Code      int64 `json:"code_bytes"`
	OpenVINO  int64 `json:"openvino_heap_bytes"`
	OtherFile int64 `json:"other_file_bytes"`
}

// Memory splits the resident set (procfs.Smaps) into MemoryParts, the
// weights being the mappings inside weights and kv the caller's count of
// resident KV bytes.
func Memory(weights Region, kv int64) MemoryParts {
	p := MemoryParts{PeakRSS: PeakRSS(), KV: kv}
	program, _ := os.Executable()
	var anon int64
	for _, m := range procfs.Smaps() {
		p.RSS += m.Rss
		switch {
		case weights.Len > 0 && m.Start >= weights.Start && m.End <= weights.Start+weights.Len+pageRound:
			p.Weights += m.Rss
		case strings.HasPrefix(m.Path, "/"):
			if strings.Contains(m.Path, ".so") || m.Path == program {
				p.Code += m.Rss - m.Anon
			} else {
				p.OtherFile += m.Rss - m.Anon
			}
			anon += m.Anon
		default:
			anon += m.Rss
		}
	}
	p.GoHeap = goHeap()
	p.OpenVINO = max(0, anon-p.GoHeap-p.KV)
	return p
}

// pageRound lets the last mapping of a region end on its page boundary.
const pageRound = 1 << 12

// goHeap is the memory Go's runtime holds from the OS and has not given
// back, less what it never touched: heap objects, free spans not yet
// released, stacks and the runtime's own structures.
func goHeap() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	var v [2]int64
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = int64(s[i].Value.Uint64())
		}
	}
	return max(0, v[0]-v[1])
}
