package ovexec

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// testWorkerEnv makes the test binary a compile worker (see testWorker).
const testWorkerEnv = "OVEXEC_TEST_COMPILE_WORKER"

func TestMain(m *testing.M) {
	testenv.UseProjectOpenVINO()
	if os.Getenv(testWorkerEnv) == "1" {
		os.Exit(runTestWorker())
	}
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

// runTestWorker is WorkerMain behind the command line the parent gives:
// compile-worker --graph NAME --out PATH.
func runTestWorker() int {
	args := os.Args[1:]
	if len(args) != 5 || args[0] != "compile-worker" || args[1] != "--graph" || args[3] != "--out" {
		fmt.Fprintf(os.Stderr, "test worker: unexpected arguments %q\n", args)
		return 2
	}
	if err := WorkerMain(context.Background(), os.Stdin, os.Stdout, args[2], args[4]); err != nil {
		fmt.Fprintln(os.Stderr, "test worker:", err)
		return 1
	}
	return 0
}
