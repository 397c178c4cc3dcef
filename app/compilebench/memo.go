package compilebench

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// EnvMemoStats names the counter file a preloaded memoization patch writes
// (see patches/README.md): ovtrace sets it, to a fresh path, for every
// compile process it starts.
const EnvMemoStats = "OVTRACE_MEMO_STATS"

// Layout of a counter file, version 1 (patches/dyncast-memo/dyncast_memo.cc).
const (
	memoMagic       = "OVTMEMO1"
	memoHeaderBytes = 128
	memoMaxBytes    = 1 << 20
)

// MemoStats are the counters one process of a memoization patch kept,
// summed over its threads.
type MemoStats struct {
	// Patch names the patch that wrote them.
	Patch string `json:"patch"`
	// Counters by name; every patch keeps at least calls and hits.
	Counters map[string]uint64 `json:"counters"`
}

// HitRate is hits/calls (0 without calls).
func (m *MemoStats) HitRate() float64 {
	if m == nil || m.Counters["calls"] == 0 {
		return 0
	}
	return float64(m.Counters["hits"]) / float64(m.Counters["calls"])
}

// ReadMemoStats reads a counter file. A missing file is (nil, nil): the
// process loaded no patch that counts; so is a file the patch has created
// but not yet initialised (empty, or its magic still zero).
func ReadMemoStats(path string) (*MemoStats, error) {
	b, err := safefile.ReadFile(path, memoMaxBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) < len(memoMagic) || bytes.Equal(b[:len(memoMagic)], make([]byte, len(memoMagic))) {
		return nil, nil
	}
	return ParseMemoStats(b)
}

// ParseMemoStats decodes a counter file's bytes: a 128-byte header (magic,
// version, slot size and count, slots claimed, counters per slot, patch
// name, counter names), then the per-thread slots of uint64 counters.
func ParseMemoStats(b []byte) (*MemoStats, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("memo counter file: %s", fmt.Sprintf(format, args...))
	}
	if len(b) < memoHeaderBytes || string(b[:8]) != memoMagic {
		return nil, bad("no %s header", memoMagic)
	}
	le := binary.LittleEndian
	version, slotBytes, slots, used, counters := le.Uint32(b[8:]), le.Uint32(b[12:]), le.Uint32(b[16:]), le.Uint32(b[20:]), le.Uint32(b[24:])
	if version != 1 {
		return nil, bad("version %d, want 1", version)
	}
	if slotBytes == 0 || slotBytes%8 != 0 || slotBytes > 4096 || counters == 0 || counters > slotBytes/8 || slots == 0 || slots > 1<<16 {
		return nil, bad("slot size %d, %d slots, %d counters", slotBytes, slots, counters)
	}
	if need := memoHeaderBytes + int(slots)*int(slotBytes); len(b) < need {
		return nil, bad("%d bytes, the header promises %d", len(b), need)
	}
	names := strings.Split(cString(b[64:128]), ",")
	if len(names) != int(counters) {
		return nil, bad("%d counter names for %d counters", len(names), counters)
	}
	m := &MemoStats{Patch: cString(b[32:64]), Counters: make(map[string]uint64, len(names))}
	used = min(used, slots)
	for i := range int(used) {
		slot := b[memoHeaderBytes+i*int(slotBytes):]
		for j, name := range names {
			m.Counters[name] += le.Uint64(slot[8*j:])
		}
	}
	return m, nil
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// memoStatsPath returns a fresh counter-file path in dir for one process.
func memoStatsPath(dir string) (string, error) {
	f, err := os.CreateTemp(dir, "memo-*.stats")
	if err != nil {
		return "", err
	}
	name := f.Name()
	f.Close()
	// The patch creates the file itself (O_EXCL): leave only the name.
	return name, os.Remove(name)
}

// shmDir is where counter files go: a tmpfs, so that the patch's counters
// live in memory that is never written back to a disk while it compiles.
var shmDir = "/dev/shm"

// NewMemoStatsPath returns a fresh path for one process's counter file
// (OVTRACE_MEMO_STATS), in a new folder under /dev/shm (else the temporary
// folder), and the function that removes that folder.
func NewMemoStatsPath() (string, func(), error) {
	root := ""
	if fi, err := os.Stat(shmDir); err == nil && fi.IsDir() {
		root = shmDir
	}
	dir, err := os.MkdirTemp(root, "ovtrace-memo-")
	if err != nil && root != "" {
		dir, err = os.MkdirTemp("", "ovtrace-memo-")
	}
	if err != nil {
		return "", nil, err
	}
	path, err := memoStatsPath(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return path, func() { os.RemoveAll(dir) }, nil
}

// Sub returns the counts m gained since before (nil when m is nil; before
// nil counts as zero).
func (m *MemoStats) Sub(before *MemoStats) *MemoStats {
	if m == nil {
		return nil
	}
	out := &MemoStats{Patch: m.Patch, Counters: make(map[string]uint64, len(m.Counters))}
	for k, v := range m.Counters {
		if before != nil {
			v -= min(v, before.Counters[k])
		}
		out.Counters[k] = v
	}
	return out
}

// MemoSummary is one variant's memoization counters over its measured
// trials (one compile each).
type MemoSummary struct {
	Variant string `json:"variant"`
	Patch   string `json:"patch"`
	// Trials is the number of trials that counted.
	Trials int `json:"trials"`
	// Counters are the sums over those trials.
	Counters map[string]uint64 `json:"counters"`
	// CallsPerCompile is calls / trials.
	CallsPerCompile float64 `json:"calls_per_compile"`
	// HitRate is hits / calls over all trials.
	HitRate float64 `json:"hit_rate"`
}

// summariseMemo sums the trials' memo counters per variant.
func summariseMemo(variants []Variant, trials []Trial) []MemoSummary {
	var out []MemoSummary
	for _, v := range variants {
		s := MemoSummary{Variant: v.Name, Counters: map[string]uint64{}}
		for _, t := range trials {
			if t.Variant != v.Name || t.Memo == nil {
				continue
			}
			s.Trials++
			s.Patch = t.Memo.Patch
			for k, n := range t.Memo.Counters {
				s.Counters[k] += n
			}
		}
		if s.Trials == 0 {
			continue
		}
		tot := MemoStats{Counters: s.Counters}
		s.CallsPerCompile = float64(s.Counters["calls"]) / float64(s.Trials)
		s.HitRate = tot.HitRate()
		out = append(out, s)
	}
	return out
}
