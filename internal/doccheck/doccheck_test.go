package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func testApp() *cli.App {
	return &cli.App{Name: "tool", Commands: []*cli.Command{{
		Name: "run",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Required: true},
			&cli.StringFlag{Name: "policy", Value: "a", Action: func(_ *cli.Context, v string) error {
				if v != "a" && v != "b" {
					return cli.Exit("bad policy "+v, 1)
				}
				return nil
			}},
			&cli.IntFlag{Name: "n"},
			&cli.BoolFlag{Name: "quiet"},
		},
		Action: func(*cli.Context) error { panic("actions must not run") },
	}}}
}

func TestFindAndCheck(t *testing.T) {
	doc := "Intro with `tool run --model M --policy a|b` and `tool's` prose and `tool run --nosuch`.\n" +
		"```sh\n" +
		"$ tool run --model m --policy b \\\n" +
		"    --n 3 --quiet   # a comment\n" +
		"tool run --model m && tool run --model m --policy c\n" +
		"tool run --policy a\n" +
		"X=1 bin/tool run --model m --n three\n" +
		"tool run ... --policy b\n" +
		"tool walk\n" +
		"other --flag\n" +
		"```\n"
	lines := findIn("doc.md", doc, "tool")
	type want struct {
		line   int
		strict bool
		err    string // "" = accepted
	}
	wants := []want{
		{1, false, ""},
		{1, false, "no flag --nosuch"},
		{3, true, ""},
		{5, true, ""},
		{5, true, "bad policy c"},
		{6, true, "Required flag \"model\" not set"},
		{7, true, "invalid value \"three\""},
		{8, false, ""},
		{9, true, "No help topic for 'walk'"},
	}
	if len(lines) != len(wants) {
		for _, l := range lines {
			t.Log(l)
		}
		t.Fatalf("found %d lines, want %d", len(lines), len(wants))
	}
	for i, w := range wants {
		l := lines[i]
		if l.Line != w.line || l.Strict != w.strict {
			t.Errorf("line %d: got line %d strict %v, want %d %v (%s)", i, l.Line, l.Strict, w.line, w.strict, l.Text)
		}
		err := Check(testApp(), l, nil)
		switch {
		case w.err == "" && err != nil:
			t.Errorf("%s: %v", l, err)
		case w.err != "" && (err == nil || !strings.Contains(err.Error(), w.err)):
			t.Errorf("%s: error %v, want one containing %q", l, err, w.err)
		}
	}
}

func TestBadEnumInAlternatives(t *testing.T) {
	lines := findIn("doc.md", "`tool run --model M --policy a|z`", "tool")
	if len(lines) != 1 {
		t.Fatalf("found %d lines", len(lines))
	}
	if err := Check(testApp(), lines[0], nil); err == nil || !strings.Contains(err.Error(), "bad policy z") {
		t.Errorf("error %v, want bad policy z", err)
	}
}

// The command-line packages read only flags their commands declare.
func TestNoUndeclaredFlagReads(t *testing.T) {
	for _, dir := range []string{"../../cmd/ovrun", "../../cmd/ovtrace", "../../app/plan"} {
		msgs, err := UndeclaredReads(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			t.Errorf("%s: %s", dir, m)
		}
	}
}

// The check finds the bugs it exists for: a flag read but not declared
// (a literal, or one made by a shared constructor), and a flag read by a
// string.
func TestUndeclaredReadIsFound(t *testing.T) {
	dir := t.TempDir()
	src := `package main

import "github.com/urfave/cli/v2"

var (
	aFlag = &cli.StringFlag{Name: "a"}
	bFlag = &cli.StringFlag{Name: "b"}
	cFlag = cliutil.DeviceFlag()
	dFlag = cliutil.QuietFlag()
	shared = []cli.Flag{aFlag, dFlag}
)

var cmd = &cli.Command{Name: "x", Flags: shared, Action: act}

func act(c *cli.Context) error { _ = aFlag.Get(c); return helper(c) }

func helper(c *cli.Context) error { _ = bFlag.Get(c); _ = c.String("a"); _ = cFlag.Get(c); _ = dFlag.Get(c); return nil }
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	msgs, err := UndeclaredReads(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 || !strings.Contains(msgs[0], `flag "a" read by its name`) || !strings.Contains(msgs[1], "bFlag") || !strings.Contains(msgs[2], "cFlag") {
		t.Errorf("got %q, want one message about c.String(\"a\"), one about bFlag and one about cFlag", msgs)
	}
}

func TestContainerLines(t *testing.T) {
	text := "      containers:\n        - name: w\n          command: [\"ovrun\"]\n          args:\n            - worker\n            - --queue=nats://n:4222\n          env:\n"
	got := containerLines("x.yaml", text, "ovrun")
	if len(got) != 1 || strings.Join(got[0].Args, " ") != "ovrun worker --queue=nats://n:4222" || !got[0].Strict {
		t.Fatalf("containerLines = %+v", got)
	}
}
