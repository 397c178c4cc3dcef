package procfs

import (
	"strings"
	"syscall"
)

// ReleaseCode drops the resident pages of this process's read-only file
// mappings that hold nothing but the file's bytes (the program's and the
// shared libraries' code and constants: permissions r-xp or r--p, no
// anonymous pages) from its resident set, as MADV_DONTNEED does for such a
// private mapping: the mapping stays, and a page used again faults back in
// from the page cache. A mapping with anonymous pages (relocations the
// dynamic linker wrote before making it read-only) or a writable one is
// never touched: dropping it would lose what was written. It returns the
// resident bytes it dropped.
//
// A process that compiles a graph runs much of OpenVINO's code once (the
// IR reader, the compile's passes) and little of it afterwards, and Go's
// runtime reads much of the program's tables at start-up only; what they
// left resident is not the process's working set.
func ReleaseCode() int64 {
	var dropped int64
	for _, m := range Smaps() {
		if (m.Perms != "r-xp" && m.Perms != "r--p") || !strings.HasPrefix(m.Path, "/") || m.Anon != 0 || m.Rss == 0 {
			continue
		}
		// The raw call: the range is the kernel's, not a Go object.
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, m.Start, m.End-m.Start, syscall.MADV_DONTNEED); errno == 0 {
			dropped += m.Rss
		}
	}
	return dropped
}
