package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/ovtoolkit/ovrun"

// Two words of a rule's may list that stand for many packages.
const (
	everything = "everything"   // any package of ours but cmd/... and the test-only ones
	leaves     = "leaf helpers" // any package in internal/ that is not test-only
)

// A rule is one row of the table in docs/design.md §2; the two change
// together. Paths are relative to the module.
type rule struct {
	pkg      string   // a package, or a folder and everything below it ("app/...")
	may      []string // the packages of ours it may import, outside its tests
	pureGo   bool     // never ov, runtime/ovexec, app/... or cmd/..., not even in its tests (CGO_ENABLED=0 go test builds it)
	stdlib   bool     // nothing from outside this module, also through the packages of ours it imports
	testOnly bool     // imported only by tests and by other test-only packages
}

// rules is docs/design.md §2's table. Beyond each row: nothing imports a
// command, only cmd/ and app/ import the app layer, and only ov uses cgo.
var rules = []rule{
	{pkg: "cmd/...", may: []string{everything}},
	{pkg: "app/...", may: []string{everything}},
	{pkg: "app/campaignq/natstest", testOnly: true},
	{pkg: "runtime/ovexec", may: []string{"ov", "model", "runtime", "compilecost", "rungcache", "rungcache/s3store", leaves}},
	{pkg: "rungcache", may: []string{"model", leaves}, pureGo: true},
	{pkg: "rungcache/s3store", may: []string{"rungcache", leaves}, pureGo: true},
	{pkg: "serve", may: []string{"engine", "chat", "tokenizer", leaves}, pureGo: true},
	{pkg: "engine", may: []string{"runtime", "model", "ladder", "compilecost", "tracing", leaves}, pureGo: true},
	{pkg: "runtime", may: []string{"ladder", "compilecost", "model", "tracing", leaves}, pureGo: true},
	{pkg: "compilecost", may: []string{"ladder", leaves}, pureGo: true, stdlib: true},
	{pkg: "ladder", pureGo: true, stdlib: true},
	{pkg: "model", may: []string{"tokenizer", leaves}, pureGo: true},
	{pkg: "tokenizer", may: []string{leaves}, pureGo: true},
	{pkg: "chat", may: []string{"tokenizer", leaves}, pureGo: true},
	{pkg: "tracing", may: []string{leaves}, pureGo: true},
	{pkg: "ov"},
	{pkg: "internal/safefile", pureGo: true, stdlib: true},
	{pkg: "internal/stats", pureGo: true, stdlib: true},
	{pkg: "internal/procfs", pureGo: true, stdlib: true},
	{pkg: "internal/childproc", may: []string{"internal/procfs"}, pureGo: true, stdlib: true},
	{pkg: "internal/cliutil", may: []string{"internal/safefile"}, pureGo: true},
	{pkg: "internal/hugepages", pureGo: true, stdlib: true},
	{pkg: "internal/npy", may: []string{"internal/safefile"}, pureGo: true, stdlib: true},
	{pkg: "internal/svg", pureGo: true, stdlib: true},
	{pkg: "internal/traffic", pureGo: true, stdlib: true},
	{pkg: "internal/schema", pureGo: true, stdlib: true},
	{pkg: "internal/every", pureGo: true, stdlib: true},
	{pkg: "internal/testpy", pureGo: true, stdlib: true, testOnly: true},
	{pkg: "internal/testenv", may: []string{"model", "internal/testpy", leaves}, pureGo: true, testOnly: true},
	{pkg: "internal/doccheck", may: []string{leaves}, pureGo: true, testOnly: true},
	{pkg: "internal/layers", pureGo: true, stdlib: true, testOnly: true},
}

// pkg is what `go list -json` says of one package.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	CgoFiles     []string
	Error        *struct{ Err string }
}

func TestImportRules(t *testing.T) {
	pkgs, err := listPackages()
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < len(rules) {
		t.Fatalf("go list found %d packages of %s, fewer than the %d rules", len(pkgs), module, len(rules))
	}
	for _, p := range append(check(pkgs), unusedRows(pkgs)...) {
		t.Error(p)
	}
}

// The rules catch what they forbid: each case breaks one, on packages
// made up for it.
func TestRulesCatchForbiddenImports(t *testing.T) {
	tests := []struct {
		name string
		pkgs []pkg
		want string // a problem that holds this; "" for none
	}{
		{name: "the documented layering", pkgs: []pkg{
			{ImportPath: "cmd/ovrun", Imports: []string{"app/bench", "ov", "runtime/ovexec", "rungcache/s3store"}, TestImports: []string{"internal/testenv", "internal/doccheck"}},
			{ImportPath: "app/compilebench", Imports: []string{"app/campaignq", "ov", "runtime/ovexec"}},
			{ImportPath: "runtime", Imports: []string{"ladder", "compilecost", "model", "tracing", "internal/procfs"}, TestImports: []string{"internal/testenv"}},
			{ImportPath: "compilecost", Imports: []string{"ladder", "internal/stats", "std:encoding/json"}},
			{ImportPath: "internal/stats"},
			{ImportPath: "internal/testenv", Imports: []string{"model", "internal/testpy"}},
			{ImportPath: "ov", CgoFiles: []string{"core.go"}},
		}},
		{name: "runtime imports ov", want: "runtime imports ov:",
			pkgs: []pkg{{ImportPath: "runtime", Imports: []string{"ov"}}}},
		{name: "engine imports runtime/ovexec", want: "engine imports runtime/ovexec:",
			pkgs: []pkg{{ImportPath: "engine", Imports: []string{"runtime/ovexec"}}}},
		{name: "a library imports the app layer", want: "serve imports app/bench: only cmd/ and app/",
			pkgs: []pkg{{ImportPath: "serve", Imports: []string{"app/bench"}}}},
		{name: "the app layer imports a command", want: "app/plan imports cmd/ovrun: nothing imports a command",
			pkgs: []pkg{{ImportPath: "app/plan", Imports: []string{"cmd/ovrun"}}}},
		{name: "a leaf helper imports a layer", want: "internal/svg imports model:",
			pkgs: []pkg{{ImportPath: "internal/svg", Imports: []string{"model"}}}},
		{name: "ladder imports a module", want: "ladder is standard library only, but imports github.com/urfave/cli/v2",
			pkgs: []pkg{{ImportPath: "ladder", Imports: []string{"github.com/urfave/cli/v2"}}}},
		{name: "compilecost reaches a module through a leaf", want: "through internal/cliutil",
			pkgs: []pkg{
				{ImportPath: "compilecost", Imports: []string{"internal/cliutil"}},
				{ImportPath: "internal/cliutil", Imports: []string{"github.com/urfave/cli/v2"}},
			}},
		{name: "cgo outside ov", want: "model uses cgo",
			pkgs: []pkg{{ImportPath: "model", CgoFiles: []string{"blas.go"}}}},
		{name: "a test helper in a binary", want: "serve imports internal/testenv: it is for tests only",
			pkgs: []pkg{{ImportPath: "serve", Imports: []string{"internal/testenv"}}}},
		{name: "a pure-Go package's tests import ov", want: "runtime's tests import ov:",
			pkgs: []pkg{{ImportPath: "runtime", TestImports: []string{"ov"}}}},
		{name: "a package with no row", want: "gadgets: no row",
			pkgs: []pkg{{ImportPath: "gadgets"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range tt.pkgs {
				p := &tt.pkgs[i]
				p.ImportPath = abs(p.ImportPath)
				for _, l := range []*[]string{&p.Imports, &p.TestImports, &p.XTestImports} {
					for j, imp := range *l {
						(*l)[j] = abs(imp)
					}
				}
			}
			got := check(tt.pkgs)
			if tt.want == "" {
				if len(got) > 0 {
					t.Fatalf("problems in a layering the rules allow:\n%s", strings.Join(got, "\n"))
				}
				return
			}
			if !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, tt.want) }) {
				t.Fatalf("no problem holds %q; got:\n%s", tt.want, strings.Join(got, "\n"))
			}
		})
	}
}

// abs turns a path of the cases into an import path: a module-relative
// path into this module's, "std:" and another module's path as they are.
func abs(p string) string {
	if std, ok := strings.CutPrefix(p, "std:"); ok {
		return std
	}
	if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") {
		return p
	}
	return module + "/" + p
}

// listPackages asks the go command for every package of the module, with
// cgo on so that cgo files are listed as such.
func listPackages() ([]pkg, error) {
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,CgoFiles,Error", module+"/...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.Bytes())
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// check returns one line per broken rule.
func check(pkgs []pkg) []string {
	var problems []string
	byPath := map[string]pkg{}
	for _, p := range pkgs {
		if rel, ok := ours(p.ImportPath); ok {
			byPath[rel] = p
		}
	}
	paths := make([]string, 0, len(byPath))
	for rel := range byPath {
		paths = append(paths, rel)
	}
	slices.Sort(paths)
	for _, from := range paths {
		p := byPath[from]
		if p.Error != nil {
			problems = append(problems, fmt.Sprintf("%s: go list: %s", from, p.Error.Err))
		}
		r, ok := ruleFor(from)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: no row in docs/design.md §2 and in this test's rules", from))
			continue
		}
		if len(p.CgoFiles) > 0 && from != "ov" {
			problems = append(problems, fmt.Sprintf("%s uses cgo (%s): only ov may", from, strings.Join(p.CgoFiles, ", ")))
		}
		for _, imp := range p.Imports {
			if to, ok := ours(imp); ok {
				if why := forbidden(from, r, to, false); why != "" {
					problems = append(problems, fmt.Sprintf("%s imports %s: %s", from, to, why))
				}
			}
		}
		for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
			if to, ok := ours(imp); ok && to != from {
				if why := forbidden(from, r, to, true); why != "" {
					problems = append(problems, fmt.Sprintf("%s's tests import %s: %s", from, to, why))
				}
			}
		}
		if r.stdlib {
			for _, m := range modules(from, byPath) {
				problems = append(problems, fmt.Sprintf("%s is standard library only, but imports %s", from, m))
			}
		}
	}
	return problems
}

// forbidden says why from (under rule r) may not import to, or "" when it may.
func forbidden(from string, r rule, to string, inTests bool) string {
	switch {
	case under(to, "cmd"):
		return "nothing imports a command"
	case under(to, "app") && !under(from, "cmd") && !under(from, "app"):
		return "only cmd/ and app/ import the app layer"
	case r.pureGo && (to == "ov" || to == "runtime/ovexec"):
		return fmt.Sprintf("%s is pure Go (docs/design.md §2), in its tests too", from)
	case inTests:
		return ""
	}
	if tr, ok := ruleFor(to); ok && tr.testOnly && !r.testOnly {
		return "it is for tests only"
	}
	for _, m := range r.may {
		if m == everything || m == to || m == leaves && isLeaf(to) {
			return ""
		}
	}
	if len(r.may) == 0 {
		return "docs/design.md §2 lets it import nothing of ours"
	}
	return "docs/design.md §2 lets it import only " + strings.Join(r.may, ", ")
}

// modules lists the imports from outside the standard library and this
// module that from reaches through its own imports, each with the first
// package of ours it comes through.
func modules(from string, byPath map[string]pkg) []string {
	var found []string
	seen := map[string]bool{from: true}
	var walk func(rel, via string)
	walk = func(rel, via string) {
		for _, imp := range byPath[rel].Imports {
			if to, ok := ours(imp); ok {
				if !seen[to] {
					seen[to] = true
					if via == "" {
						walk(to, to)
					} else {
						walk(to, via)
					}
				}
			} else if !isStd(imp) {
				if via != "" {
					imp += " (through " + via + ")"
				}
				found = append(found, imp)
			}
		}
	}
	walk(from, "")
	return found
}

// unusedRows names the rows for one package that no package matches: a
// package moved or removed without its row.
func unusedRows(pkgs []pkg) []string {
	have := map[string]bool{}
	for _, p := range pkgs {
		if rel, ok := ours(p.ImportPath); ok {
			have[rel] = true
		}
	}
	var problems []string
	for _, r := range rules {
		if !strings.HasSuffix(r.pkg, "/...") && !have[r.pkg] {
			problems = append(problems, fmt.Sprintf("rule for %s: no such package (update docs/design.md §2 and this test's rules)", r.pkg))
		}
	}
	return problems
}

// ruleFor is the row for a package: its own, else that of the deepest
// folder above it.
func ruleFor(p string) (rule, bool) {
	var best rule
	bestDir := ""
	for _, r := range rules {
		if r.pkg == p {
			return r, true
		}
		if dir, ok := strings.CutSuffix(r.pkg, "/..."); ok && under(p, dir) && len(dir) > len(bestDir) {
			best, bestDir = r, dir
		}
	}
	return best, bestDir != ""
}

// isLeaf says whether p is a leaf helper: in internal/, not test-only.
func isLeaf(p string) bool {
	r, ok := ruleFor(p)
	return ok && r.pkg == p && strings.HasPrefix(p, "internal/") && !r.testOnly
}

// ours turns an import path of this module into its module-relative path.
func ours(importPath string) (string, bool) {
	return strings.CutPrefix(importPath, module+"/")
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// isStd says whether an import path is the standard library's (or cgo's
// "C"): its first element has no dot, and it is not this module's.
func isStd(p string) bool {
	if _, ok := ours(p); ok {
		return false
	}
	first, _, _ := strings.Cut(p, "/")
	return !strings.Contains(first, ".")
}
