// Package doccheck finds the command lines that the project's documentation
// shows (README.md, docs/*.md, patches/*/README.md, and the containers'
// command lines of the Kubernetes examples in docs/k8s) and checks each against
// the real command definitions, so documentation that drifts from the code
// fails the build: a subcommand or flag that does not exist, a value a flag
// refuses, a required flag left out.
package doccheck

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// Line is one documented command line.
type Line struct {
	File string // relative to the repository root
	Line int    // 1-based line where the command starts
	Text string // as written, continuation lines joined
	Args []string
	// Strict lines are complete commands (a fenced code block without
	// placeholders such as "...", $VAR or [knobs]): they are parsed by the
	// real parser, required flags included. Others (inline code, lines
	// with placeholders) are checked name by name.
	Strict bool
}

func (l Line) String() string { return fmt.Sprintf("%s:%d: %s", l.File, l.Line, l.Text) }

// Files lists the documentation files under root that are checked.
func Files(root string) ([]string, error) {
	var out []string
	for _, pat := range []string{"README.md", "docs/*.md", "patches/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	return out, nil
}

// Find returns the command lines of program prog ("ovrun") in the
// documentation under root.
func Find(root, prog string) ([]Line, error) {
	files, err := Files(root)
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
		out = append(out, findIn(rel, string(b), prog)...)
	}
	more, err := findManifests(root, prog)
	return append(out, more...), err
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

func findIn(file, text, prog string) []Line {
	var out []Line
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	inFence, n := false, 0
	var pending string
	pendingAt := 0
	for sc.Scan() {
		n++
		raw := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(raw), "```") {
			inFence = !inFence
			pending = ""
			continue
		}
		if !inFence {
			for _, m := range inlineCode.FindAllStringSubmatch(raw, -1) {
				out = append(out, commands(file, n, m[1], prog, false)...)
			}
			continue
		}
		if pending == "" {
			pendingAt = n
		}
		body := strings.TrimRight(stripComment(raw), " \t")
		if strings.HasSuffix(body, `\`) {
			pending += strings.TrimSuffix(body, `\`) + " "
			continue
		}
		out = append(out, commands(file, pendingAt, pending+body, prog, true)...)
		pending = ""
	}
	return out
}

// commands splits a shell line at ;, && and | and returns the segments
// that run prog.
func commands(file string, at int, text, prog string, fenced bool) []Line {
	text = strings.TrimSpace(text)
	text = strings.TrimPrefix(text, "$ ")
	var out []Line
	for _, seg := range splitShell(text) {
		args := fields(seg)
		// Leading shell words and environment assignments.
		for len(args) > 0 && (slices.Contains([]string{"do", "then", "time", "env", "sudo"}, args[0]) || isAssignment(args[0])) {
			args = args[1:]
		}
		if len(args) < 2 || filepath.Base(args[0]) != prog {
			continue
		}
		if !fenced && !strings.HasPrefix(args[1], "-") && !isWord(args[1]) {
			continue // prose such as `ovrun's`
		}
		strict := fenced && !strings.ContainsAny(seg, "$[") && !strings.Contains(seg, "...")
		out = append(out, Line{File: file, Line: at, Text: strings.TrimSpace(seg), Args: args, Strict: strict})
	}
	return out
}

var (
	word    = regexp.MustCompile(`^[a-z][a-z-]*$`)
	envName = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
)

func isWord(s string) bool { return word.MatchString(s) }

func isAssignment(s string) bool {
	k, _, ok := strings.Cut(s, "=")
	return ok && envName.MatchString(k)
}

// stripComment drops a trailing " # comment" outside quotes.
func stripComment(s string) string {
	var q rune
	for i, r := range s {
		switch {
		case q != 0:
			if r == q {
				q = 0
			}
		case r == '\'' || r == '"':
			q = r
		case r == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return s[:i]
		}
	}
	return s
}

// isPipe reports a "|" or "||" with a space before it: "perf|callgrind"
// is a value with alternatives, "a | b" a pipe.
func isPipe(s string, i int) bool {
	return s[i] == '|' && i > 0 && s[i-1] == ' '
}

// splitShell splits at ;, &&, || and | outside quotes.
func splitShell(s string) []string {
	var out []string
	var q rune
	start := 0
	for i := 0; i < len(s); i++ {
		r := rune(s[i])
		switch {
		case q != 0:
			if r == q {
				q = 0
			}
		case r == '\'' || r == '"':
			q = r
		case r == ';' || isPipe(s, i) || (r == '&' && i+1 < len(s) && s[i+1] == '&'):
			out = append(out, s[start:i])
			if i+1 < len(s) && (s[i+1] == '&' || s[i+1] == '|') {
				i++
			}
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// fields splits like a shell: whitespace separates, quotes group.
func fields(s string) []string {
	var out []string
	var cur strings.Builder
	var q rune
	has := false
	for _, r := range s {
		switch {
		case q != 0:
			if r == q {
				q = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			q, has = r, true
		case r == ' ' || r == '\t':
			if has || cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
				has = false
			}
		default:
			cur.WriteRune(r)
		}
	}
	if has || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// Check parses l against app. prepare, when not nil, rearranges the
// arguments as the program's main does before parsing (ovtrace lets flags
// follow positional arguments).
func Check(app *cli.App, l Line, prepare func(*cli.App, []string) []string) error {
	args := l.Args
	if prepare != nil {
		args = prepare(app, args)
	}
	if l.Strict {
		return parse(app, args)
	}
	return checkNames(app, args)
}

// parse runs the real parser with every action replaced by a no-op, so
// flag actions (value checks) and required flags are checked and nothing
// runs.
func parse(app *cli.App, args []string) error {
	a := *app
	a.Writer, a.ErrWriter = io.Discard, io.Discard
	a.Commands = noops(app.Commands)
	a.ExitErrHandler = func(*cli.Context, error) {}
	return a.RunContext(context.Background(), args)
}

// noops copies commands, their subcommands included, with no-op actions.
func noops(cmds []*cli.Command) []*cli.Command {
	var out []*cli.Command
	for _, c := range cmds {
		cp := *c
		cp.Action = func(*cli.Context) error { return nil }
		cp.Before, cp.After = nil, nil
		cp.Subcommands = noops(c.Subcommands)
		out = append(out, &cp)
	}
	return out
}

// checkNames checks a partial command: the subcommand and each flag exist,
// and literal values of flags that check their values are accepted (a
// value "a|b" stands for each alternative; CAPITALS and $VARS are
// placeholders).
func checkNames(app *cli.App, args []string) error {
	if len(args) < 2 {
		return nil
	}
	if strings.HasPrefix(args[1], "-") {
		return nil // program-level flags such as --help
	}
	cmd := app.Command(args[1])
	if cmd == nil {
		return fmt.Errorf("no subcommand %q", args[1])
	}
	flags := map[string]cli.Flag{"help": cli.HelpFlag, "h": cli.HelpFlag}
	for _, f := range cmd.Flags {
		for _, n := range f.Names() {
			flags[n] = f
		}
	}
	for i := 2; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" || a == "..." {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := flags[name]
		if !ok {
			return fmt.Errorf("%s %s: no flag --%s", args[0], args[1], name)
		}
		if _, isBool := f.(*cli.BoolFlag); isBool {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil // prose naming a flag: `ovrun run --compile-cost`
			}
			i++
			value = args[i]
		}
		if err := checkValue(f, value); err != nil {
			return err
		}
	}
	return nil
}

var placeholder = regexp.MustCompile(`^[A-Z][A-Z0-9_.]*$|\$|^\.\.\.$|^<.*>$`)

func checkValue(f cli.Flag, value string) error {
	sf, ok := f.(*cli.StringFlag)
	if !ok || sf.Action == nil || placeholder.MatchString(value) {
		return nil
	}
	for _, alt := range strings.Split(value, "|") {
		if err := sf.Action(nil, alt); err != nil {
			return err
		}
	}
	return nil
}
