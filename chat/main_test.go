package chat

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// The test binary is the worker too: the package's init serves when
// OVRUN_TEMPLATE_WORKER is set, before TestMain.
func TestMain(m *testing.M) {
	code := m.Run()
	workers.stopAll()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
