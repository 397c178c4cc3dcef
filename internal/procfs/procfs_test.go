package procfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKB(t *testing.T) {
	p := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(p, []byte("Name:\tx\nVmHWM:\t   2048 kB\nVmRSS:\t 1024 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]int64{"VmHWM:": 2 << 20, "VmRSS:": 1 << 20, "VmSwap:": 0} {
		if got := KB(p, field); got != want {
			t.Errorf("%s = %d, want %d", field, got, want)
		}
	}
	if got := KB(filepath.Join(t.TempDir(), "absent"), "VmRSS:"); got != 0 {
		t.Errorf("absent file: %d, want 0", got)
	}
	if Status("self", "VmRSS:") <= 0 {
		t.Error("this process's VmRSS reads as 0")
	}
}

func TestAge(t *testing.T) {
	a := Age()
	if a < 0 || a > 3600 {
		t.Fatalf("Age() = %v s for a test process that just started", a)
	}
}

func TestSmaps(t *testing.T) {
	ms := Smaps()
	if len(ms) == 0 {
		t.Skip("no /proc/self/smaps")
	}
	var rss, file int64
	for _, m := range ms {
		if m.End <= m.Start || m.Rss < 0 || m.Anon > m.Rss+4096 {
			t.Fatalf("implausible mapping %+v", m)
		}
		rss += m.Rss
		if strings.HasSuffix(m.Path, ".test") {
			file += m.Rss
		}
	}
	if rss <= 0 || file <= 0 {
		t.Fatalf("resident %d bytes in all, %d of the test binary: want both > 0", rss, file)
	}
}
