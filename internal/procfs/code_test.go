package procfs

import (
	"os"
	"strings"
	"testing"
)

// written is changed before ReleaseCode runs: a release of a writable or
// written mapping would lose it.
var written = []int{1, 2, 3}

// TestReleaseCode drops the test program's code from the resident set and
// checks that only read-only file mappings lost pages, that what the
// program wrote survives, and that its code still runs (it faults back in).
func TestReleaseCode(t *testing.T) {
	if len(Smaps()) == 0 {
		t.Skip("no /proc/self/smaps")
	}
	written[1] = 42
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	before := Smaps()
	dropped := ReleaseCode()
	after := Smaps()
	if dropped <= 0 {
		t.Fatalf("ReleaseCode dropped %d bytes", dropped)
	}
	var exeBefore, exeAfter int64
	rss := map[uintptr]Mapping{}
	for _, m := range before {
		rss[m.Start] = m
		if m.Path == exe && m.Perms == "r-xp" {
			exeBefore += m.Rss
		}
	}
	for _, m := range after {
		if m.Path == exe && m.Perms == "r-xp" {
			exeAfter += m.Rss
		}
		b, ok := rss[m.Start]
		if ok && m.Perms != "r-xp" && m.Perms != "r--p" && m.Anon < b.Anon {
			t.Errorf("%s %s %x: anonymous pages %d -> %d", m.Path, m.Perms, m.Start, b.Anon, m.Anon)
		}
	}
	if exeAfter >= exeBefore {
		t.Errorf("the test program's code: %d resident bytes before, %d after", exeBefore, exeAfter)
	}
	if written[1] != 42 || !strings.HasPrefix(exe, "/") {
		t.Errorf("written data changed: %v", written)
	}
}
