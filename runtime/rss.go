package runtime

import "github.com/ovtoolkit/ovrun/internal/procfs"

// PeakRSS is the process's peak resident set size in bytes (VmHWM), 0 when
// /proc is unavailable.
func PeakRSS() int64 { return procfs.Status("self", "VmHWM:") }

// CurrentRSS is the process's resident set size in bytes (VmRSS).
func CurrentRSS() int64 { return procfs.Status("self", "VmRSS:") }
