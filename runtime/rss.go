package runtime

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// PeakRSS is the process's peak resident set size in bytes (VmHWM), 0 when
// /proc is unavailable.
func PeakRSS() int64 { return procStatus("VmHWM:") }

// CurrentRSS is the process's resident set size in bytes (VmRSS).
func CurrentRSS() int64 { return procStatus("VmRSS:") }

func procStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
