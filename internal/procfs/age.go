package procfs

import (
	"os"
	"strconv"
	"strings"
)

// clockTicks is the unit of /proc/PID/stat's start time (USER_HZ, 100 on
// every Linux this runs on).
const clockTicks = 100

// Age is how many seconds ago this process started (its first exec; a
// re-exec keeps the start time), from /proc/self/stat's start time and
// /proc/uptime, to 10 ms; 0 when they cannot be read.
func Age() float64 {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start past its last ')'.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 { // start time is field 22, the 20th after the name
		return 0
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return 0
	}
	u := strings.Fields(string(up))
	if len(u) == 0 {
		return 0
	}
	now, err := strconv.ParseFloat(u[0], 64)
	if err != nil {
		return 0
	}
	return max(0, now-float64(ticks)/clockTicks)
}
