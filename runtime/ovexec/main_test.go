package ovexec

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.UseProjectOpenVINO()
	code := m.Run()
	if err := testenv.Cleanup(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
