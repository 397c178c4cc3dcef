package doccheck

import (
	"os"
	"path/filepath"
	"strings"
)

// manifests are the Kubernetes examples under root whose containers run
// the binaries (docs/k8s/*.yaml).
const manifests = "docs/k8s/*.yaml"

// findManifests returns the command lines of prog that the containers of
// the manifests under root run: a container whose command is ["prog"] and
// whose args follow as a block list, one argument an item (the form the
// examples use). Each is a strict line: the real parser must take it.
func findManifests(root, prog string) ([]Line, error) {
	files, err := filepath.Glob(filepath.Join(root, manifests))
	if err != nil {
		return nil, err
	}
	var out []Line
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, f)
		out = append(out, containerLines(rel, string(b), prog)...)
	}
	return out, nil
}

// containerLines reads the manifest text of file for command: ["prog"]
// followed by args:.
func containerLines(file, text, prog string) []Line {
	lines := strings.Split(text, "\n")
	var out []Line
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != `command: ["`+prog+`"]` {
			continue
		}
		at := i + 1
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "args:" {
			continue
		}
		args := []string{prog}
		for i += 2; i < len(lines); i++ {
			item, ok := strings.CutPrefix(strings.TrimSpace(lines[i]), "- ")
			if !ok {
				break
			}
			args = append(args, strings.Trim(item, `"'`))
		}
		i--
		out = append(out, Line{File: file, Line: at, Text: strings.Join(args, " "), Args: args, Strict: true})
	}
	return out
}
