package procfs

import (
	"os"
	"path/filepath"
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
