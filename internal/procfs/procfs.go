// Package procfs reads the kB-valued fields of Linux's /proc files
// (/proc/PID/status, /proc/meminfo): the one parser behind peak and
// current RSS, the machine's memory, and a compile worker's memory limit.
package procfs

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// KB is the value of a "Field:   123 kB" line of the file at path, in
// bytes; 0 when the file or the field cannot be read. field includes its
// colon ("VmRSS:").
func KB(path, field string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Status is a kB field of /proc/PID/status ("self" for this process).
func Status(pid, field string) int64 { return KB("/proc/"+pid+"/status", field) }
