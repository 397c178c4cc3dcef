package profiling

import (
	"bytes"
	"os/exec"
	"strings"
)

// demangle replaces Itanium-mangled C++ names (_Z...) in place with their
// demangled form, using one c++filt process for all of them. Without
// c++filt, or when it fails, the names stay as they are.
func demangle(names []*string) {
	var todo []string
	seen := map[string]bool{}
	for _, n := range names {
		if strings.HasPrefix(*n, "_Z") && !seen[*n] {
			seen[*n] = true
			todo = append(todo, *n)
		}
	}
	if len(todo) == 0 {
		return
	}
	path, err := exec.LookPath("c++filt")
	if err != nil {
		return
	}
	cmd := exec.Command(path)
	cmd.Stdin = strings.NewReader(strings.Join(todo, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimSuffix(string(bytes.TrimRight(out, "\n")), "\n"), "\n")
	if len(lines) != len(todo) {
		return
	}
	m := make(map[string]string, len(todo))
	for i, t := range todo {
		m[t] = lines[i]
	}
	for _, n := range names {
		if d, ok := m[*n]; ok {
			*n = d
		}
	}
}
