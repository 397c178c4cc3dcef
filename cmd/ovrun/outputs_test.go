package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/app/bench"
	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/safefile"
	"github.com/ovtoolkit/ovrun/internal/testpy"
	"github.com/ovtoolkit/ovrun/runtime"
	"github.com/ovtoolkit/ovrun/serve"
)

// outputs are the versioned JSON outputs of docs/outputs.md: each
// schema, the Go type written, and the types inside it that another
// section documents (a report's run summaries).
var outputs = []struct {
	schema  string
	typ     any
	another []any
}{
	{generateSchema, generateOutput{}, nil},
	{runtime.SummarySchema, runtime.Summary{}, nil},
	{bench.ReportSchema, bench.Report{}, []any{runtime.Summary{}}},
	{serve.LoadResultSchema, serve.LoadResult{}, nil},
	{compilecost.ProfileSchema, compilecost.Profile{}, nil},
}

// docs/outputs.md lists every JSON field of every output, no more, with a
// "?" on its type exactly where the field is left out when empty; each
// output writes its schema first.
func TestOutputsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/outputs.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := documentedFields(string(b))
	for _, o := range outputs {
		t.Run(o.schema, func(t *testing.T) {
			typ := reflect.TypeOf(o.typ)
			fields := jsonFields(typ, o.another)
			for _, p := range fieldDrift(fields, doc[o.schema]) {
				t.Errorf("docs/outputs.md, section %s: %s", o.schema, p)
			}
			// The schema field, set, comes first.
			v := reflect.New(typ).Elem()
			f := v.FieldByName("Schema")
			if !f.IsValid() || typ.Field(0).Name != "Schema" {
				t.Fatalf("%v has no Schema as its first field", typ)
			}
			f.SetString(o.schema)
			j, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf(`{"schema":%q,`, o.schema); !strings.HasPrefix(string(j), want) {
				t.Errorf("%v is written as %.60s..., want it to start %s", typ, j, want)
			}
		})
	}
	var named []string
	for _, o := range outputs {
		named = append(named, o.schema)
	}
	for s := range doc {
		if !slices.Contains(named, s) {
			t.Errorf("docs/outputs.md documents %s, which no output writes", s)
		}
	}
}

// scripts/ovrun_json.py reads every output as Go writes it, of its own
// version, and one without a schema; it refuses a newer version. A schema
// bumped here without the scripts fails.
func TestScriptsReadOutputs(t *testing.T) {
	dir := t.TempDir()
	var args []string
	for i, o := range outputs {
		kind := strings.TrimPrefix(o.schema[:strings.Index(o.schema, "/")], "ovrun.")
		v := reflect.New(reflect.TypeOf(o.typ))
		v.Elem().FieldByName("Schema").SetString(o.schema)
		for j, doc := range []any{v.Interface(), map[string]any{"model": "m"}} {
			path := filepath.Join(dir, fmt.Sprintf("%d-%d.json", i, j))
			if err := safefile.WriteJSON(path, doc); err != nil {
				t.Fatal(err)
			}
			args = append(args, path, kind)
		}
	}
	newer := filepath.Join(dir, "newer.json")
	if err := os.WriteFile(newer, []byte(`{"schema": "ovrun.run/99"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	const script = `import sys
sys.path.insert(0, sys.argv[1])
import ovrun_json
a = sys.argv[3:]
for path, kind in zip(a[0::2], a[1::2]):
    ovrun_json.load(path, kind)
try:
    ovrun_json.load(sys.argv[2], "run")
except ovrun_json.SchemaError as e:
    print(e)
else:
    sys.exit("a newer schema was read")
`
	out := testpy.Run(t, testpy.Python(t), append([]string{"-B", "-c", script, filepath.Join(testpy.RepoRoot(t), "scripts"), newer}, args...)...)
	if want := "newer.json: schema ovrun.run/99 is newer than this script reads (ovrun.run/1)"; !strings.Contains(string(out), want) {
		t.Errorf("ovrun_json.py on a newer file said %q, want %q", out, want)
	}
}

// The check catches what it is for: a field the document lacks, one it
// lists that the type lacks, and an optional field shown as always there.
func TestOutputsDocCatchesDrift(t *testing.T) {
	type inner struct {
		A int    `json:"a"`
		B string `json:"b,omitempty"`
	}
	type out struct {
		Schema string           `json:"schema"`
		Items  []inner          `json:"items"`
		ByKey  map[string]inner `json:"by_key,omitempty"`
		When   time.Time        `json:"when"`
		Skip   int              `json:"-"`
	}
	doc := documentedFields("## `ovrun.toy/1`\n\n" +
		"| field | type | unit | meaning |\n|---|---|---|---|\n" +
		"| `schema` | string | - | |\n| `items` | [object] | - | |\n| `by_key` | object? | - | |\n| `when` | string | - | |\n" +
		"\n### `items[]`, `by_key.*`\n\n| field | type | unit | meaning |\n|---|---|---|---|\n" +
		"| `a` | int | - | |\n| `b` | string | - | |\n| `c` | int | - | |\n")
	got := fieldDrift(jsonFields(reflect.TypeOf(out{}), nil), doc["ovrun.toy/1"])
	want := []string{
		"by_key.*.b: optional (omitempty), but its type has no ?",
		"by_key.*.c: documented, but no such field",
		"items[].b: optional (omitempty), but its type has no ?",
		"items[].c: documented, but no such field",
	}
	if !slices.Equal(got, want) {
		t.Errorf("drift:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	delete(doc["ovrun.toy/1"], "items[].a")
	if got := fieldDrift(jsonFields(reflect.TypeOf(out{}), nil), doc["ovrun.toy/1"]); !slices.Contains(got, "items[].a: not documented") {
		t.Errorf("a field the document lacks is not caught: %v", got)
	}
}

// fieldDrift compares a type's fields with a section's, one line per
// difference, sorted.
func fieldDrift(fields, doc map[string]bool) []string {
	var out []string
	for p, optional := range fields {
		documented, ok := doc[p]
		switch {
		case !ok:
			out = append(out, p+": not documented")
		case optional && !documented:
			out = append(out, p+": optional (omitempty), but its type has no ?")
		case !optional && documented:
			out = append(out, p+": always written, but its type has a ?")
		}
	}
	for p := range doc {
		if _, ok := fields[p]; !ok {
			out = append(out, p+": documented, but no such field")
		}
	}
	slices.Sort(out)
	return out
}

// jsonFields walks a type's JSON fields: path -> left out when empty. A
// struct field is "name" and its fields "name.field", an array's elements'
// "name[].field", a map's values' "name.*.field". Types in another are
// not walked into (another section lists their fields), nor are types
// that marshal themselves (time.Time).
func jsonFields(t reflect.Type, another []any) map[string]bool {
	out := map[string]bool{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			ft := deref(f.Type)
			if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
				walk(ft, prefix) // promoted fields
				continue
			}
			if name == "" {
				name = f.Name
			}
			out[prefix+name] = slices.Contains(strings.Split(opts, ","), "omitempty")
			inner := name
			switch ft.Kind() {
			case reflect.Slice, reflect.Array:
				ft, inner = deref(ft.Elem()), name+"[]"
			case reflect.Map:
				ft, inner = deref(ft.Elem()), name+".*"
			}
			if ft.Kind() == reflect.Struct && !marshalsItself(ft) && !slices.ContainsFunc(another, func(a any) bool { return reflect.TypeOf(a) == ft }) {
				walk(ft, prefix+inner+".")
			}
		}
	}
	walk(deref(t), "")
	return out
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func marshalsItself(t reflect.Type) bool {
	m := reflect.TypeFor[json.Marshaler]()
	return t.Implements(m) || reflect.PointerTo(t).Implements(m)
}

var (
	schemaHeading = regexp.MustCompile("^## .*`(ovrun\\.[a-z]+/[0-9]+)`")
	backticked    = regexp.MustCompile("`([^`]+)`")
	fieldRow      = regexp.MustCompile("^\\| `([^`]+)` \\| ([^|]+) \\|")
)

// documentedFields reads docs/outputs.md: schema -> field path -> its type
// has a "?". A "## " heading naming a schema starts its section; a "### "
// heading names the prefixes of the rows below it (`rungs[]`, `fits.*`).
func documentedFields(doc string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	var section map[string]bool
	prefixes := []string{""}
	for line := range strings.Lines(doc) {
		switch {
		case strings.HasPrefix(line, "## "):
			section, prefixes = nil, []string{""}
			if m := schemaHeading.FindStringSubmatch(line); m != nil {
				section = map[string]bool{}
				out[m[1]] = section
			}
		case strings.HasPrefix(line, "### ") && section != nil:
			prefixes = nil
			for _, m := range backticked.FindAllStringSubmatch(line, -1) {
				prefixes = append(prefixes, m[1]+".")
			}
		case section != nil:
			if m := fieldRow.FindStringSubmatch(line); m != nil {
				for _, p := range prefixes {
					section[p+m[1]] = strings.HasSuffix(strings.TrimSpace(m[2]), "?")
				}
			}
		}
	}
	return out
}
