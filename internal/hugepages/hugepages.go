// Package hugepages starts ovrun and ovtrace with glibc's malloc asking the
// kernel for transparent huge pages (GLIBC_TUNABLES=glibc.malloc.hugetlb=1),
// where the kernel hands them out only on request (transparent_hugepage
// "madvise", the common default).
//
// The OpenVINO CPU plugin allocates a compiled graph's weights (repacked for
// its kernels: about 1 GB for a 0.5B model in bf16) with posix_memalign. On
// 4 KiB pages, compiling qwen2.5-0.5b takes some 900,000 page faults and a
// decode step, which streams every weight once, walks 250,000 pages; on
// 2 MiB pages the faults drop to 200,000 and the steps get 1-2% faster
// (docs/benchmarks.md "Huge pages"). glibc reads its tunables once, when the process
// starts, so the process starts itself again with the tunable set: Reexec.
package hugepages

import (
	"os"
	"strings"
	"syscall"
)

// Tunable is the glibc tunable this package sets; a GLIBC_TUNABLES that
// already names it (glibc.malloc.hugetlb=0 keeps 4 KiB pages) is left
// alone.
const Tunable = "glibc.malloc.hugetlb"

const thpMode = "/sys/kernel/mm/transparent_hugepage/enabled"

// Reexec starts this program again in place (same process id, arguments
// and environment) with Tunable=1 added to GLIBC_TUNABLES, when the kernel
// grants transparent huge pages on request and the environment does not
// name Tunable yet. Call it first in main, before any goroutine or file
// of the program's own: it returns only where nothing is to be done or the
// exec failed (then the program goes on with 4 KiB pages).
func Reexec() {
	mode, err := os.ReadFile(thpMode)
	if err != nil {
		return
	}
	env, ok := withTunable(os.Environ(), string(mode))
	if !ok {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	_ = syscall.Exec(exe, os.Args, env)
}

// On reports whether this process's malloc was started asking for huge
// pages (GLIBC_TUNABLES sets Tunable to 1).
func On() bool {
	v, set := value(os.Getenv("GLIBC_TUNABLES"))
	return set && v == "1"
}

// value is Tunable's value in tunables (GLIBC_TUNABLES: name=value pairs
// joined by colons) and whether it is named there.
func value(tunables string) (string, bool) {
	for _, t := range strings.Split(tunables, ":") {
		if v, ok := strings.CutPrefix(t, Tunable+"="); ok {
			return v, true
		}
	}
	return "", false
}

// withTunable is env with Tunable=1 appended to GLIBC_TUNABLES, and true,
// where the kernel's THP mode (the contents of thpMode, the chosen one in
// brackets) is madvise and env does not name Tunable; else env and false.
// In mode always every large allocation gets huge pages anyway, in never
// none can.
func withTunable(env []string, mode string) ([]string, bool) {
	if !strings.Contains(mode, "[madvise]") {
		return env, false
	}
	out := make([]string, 0, len(env)+1)
	found := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GLIBC_TUNABLES="); ok {
			if _, set := value(v); set {
				return env, false
			}
			if v != "" {
				v += ":"
			}
			kv, found = "GLIBC_TUNABLES="+v+Tunable+"=1", true
		}
		out = append(out, kv)
	}
	if !found {
		out = append(out, "GLIBC_TUNABLES="+Tunable+"=1")
	}
	return out, true
}
