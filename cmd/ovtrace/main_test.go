package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// The test binary doubles as ovtrace: the commands re-execute
// os.Executable() for every compile (compile-once), and with this variable
// set that child runs main instead of the tests.
const beMain = "OVTRACE_TEST_BE_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(beMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Setenv(beMain, "1")
	testenv.UseProjectOpenVINO()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if err := testenv.Cleanup(); err != nil && code == 0 {
			code = 1
		}
		os.Exit(code)
	}))
}

// ovtrace runs the app in this process and returns its standard output.
func ovtrace(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	app.ErrWriter = &out
	err := app.RunContext(context.Background(), flagsFirst(app, append([]string{"ovtrace"}, args...)))
	return out.String(), err
}

func TestFlagsFirst(t *testing.T) {
	app := newApp()
	tests := []struct{ in, want string }{
		{"ovtrace top F.pb.gz --n 20 --json", "ovtrace top --n 20 --json F.pb.gz"},
		{"ovtrace diff A B --by=object", "ovtrace diff --by=object A B"},
		{"ovtrace profile --out F -- perf-me --n 3", "ovtrace profile --out F -- perf-me --n 3"},
		{"ovtrace top", "ovtrace top"},
		{"ovtrace nosuch a --b", "ovtrace nosuch a --b"},
	}
	for _, tt := range tests {
		if got := strings.Join(flagsFirst(app, strings.Fields(tt.in)), " "); got != tt.want {
			t.Errorf("flagsFirst(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
