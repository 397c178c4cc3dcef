package procfs

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// Mapping is one mapping of /proc/self/smaps: its address range, its
// permissions ("r-xp"), the file it maps ("" for anonymous memory, or a
// pseudo-name like "[stack]"), and its resident and anonymous bytes.
type Mapping struct {
	Start, End uintptr
	Perms      string
	Path       string
	Rss, Anon  int64
}

// Smaps lists this process's mappings; nil when /proc/self/smaps cannot
// be read.
func Smaps() []Mapping {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []Mapping
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := addrRange(fields[0]); ok && !strings.HasSuffix(fields[0], ":") {
			m := Mapping{Start: lo, End: hi}
			if len(fields) >= 2 {
				m.Perms = fields[1]
			}
			if len(fields) >= 6 {
				m.Path = strings.Join(fields[5:], " ")
			}
			out = append(out, m)
			continue
		}
		if len(out) == 0 || len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Rss:":
			out[len(out)-1].Rss = kb << 10
		case "Anonymous:":
			out[len(out)-1].Anon = kb << 10
		}
	}
	return out
}

// addrRange parses "7f00-7f10" (hexadecimal).
func addrRange(s string) (lo, hi uintptr, ok bool) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, false
	}
	x, err1 := strconv.ParseUint(a, 16, 64)
	y, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil || y < x {
		return 0, 0, false
	}
	return uintptr(x), uintptr(y), true
}
