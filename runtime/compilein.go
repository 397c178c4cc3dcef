package runtime

import "fmt"

// Where graphs compile (Summary.CompileIn, ovrun's --compile-in).
const (
	CompileInProcess = "process" // this process's threads
	CompileInWorker  = "worker"  // a child process per graph, its result imported
)

// ParseCompileIn checks a --compile-in value.
func ParseCompileIn(s string) (string, error) {
	if s != CompileInProcess && s != CompileInWorker {
		return "", fmt.Errorf("compile-in %q: want %s or %s", s, CompileInProcess, CompileInWorker)
	}
	return s, nil
}
