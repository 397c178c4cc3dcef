package compilebench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseVariant(t *testing.T) {
	tests := []struct {
		name, in string
		want     Variant
	}{
		{"property", "f32=prop:INFERENCE_PRECISION_HINT=f32",
			Variant{Name: "f32", Spec: "prop:INFERENCE_PRECISION_HINT=f32", Props: map[string]string{"INFERENCE_PRECISION_HINT": "f32"}}},
		{"all kinds", "memo=lib:/opt/ov/libs, env:OV_CPU_DEBUG=1,prop:PERFORMANCE_HINT=LATENCY",
			Variant{Name: "memo", Spec: "lib:/opt/ov/libs, env:OV_CPU_DEBUG=1,prop:PERFORMANCE_HINT=LATENCY", Lib: "/opt/ov/libs",
				Env: map[string]string{"OV_CPU_DEBUG": "1"}, Props: map[string]string{"PERFORMANCE_HINT": "LATENCY"}}},
		{"value with =", "x=env:OPTS=a=b", Variant{Name: "x", Spec: "env:OPTS=a=b", Env: map[string]string{"OPTS": "a=b"}}},
		{"empty spec is the default", "base=", Variant{Name: "base"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseVariant(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tt.want.Name || got.Spec != tt.want.Spec || got.Lib != tt.want.Lib ||
				!mapsEqual(got.Props, tt.want.Props) || !mapsEqual(got.Env, tt.want.Env) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestParseVariantErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"no name", "prop:A", `want NAME=SPEC`},
		{"bad name", "a b=prop:A=1", `name "a b" must be`},
		{"no kind", "x=INFERENCE_PRECISION_HINT", `part 1 "INFERENCE_PRECISION_HINT": want prop:KEY=VALUE`},
		{"unknown kind", "x=prop:A=1,cfg:B=2", `part 2 "cfg:B=2": unknown kind "cfg"`},
		{"prop without value", "x=prop:A", `part 1 "prop:A": want prop:KEY=VALUE`},
		{"env without key", "x=env:=1", `part 1 "env:=1": want env:KEY=VALUE`},
		{"empty lib", "x=lib:", `part 1 "lib:": want lib:DIR`},
		{"two libs", "x=lib:/a,lib:/b", `part 2 "lib:/b": lib is set twice`},
		{"duplicate prop", "x=prop:A=1,prop:A=2", `part 2 "prop:A=2": prop A is set twice`},
		{"library through env", "x=env:OVRUN_OPENVINO_LIB=/a", "use lib:DIR"},
		{"preload through env", "x=env:LD_PRELOAD=/a.so", "use preload:PATH"},
		{"memo stats through env", "x=env:OVTRACE_MEMO_STATS=/tmp/s", "set by ovtrace for every compile"},
		{"empty preload", "x=preload:", `part 1 "preload:": want preload:PATH`},
		{"preload list", "x=preload:/a.so:/b.so", "one library (no ':')"},
		{"two preloads", "x=preload:/a.so,preload:/b.so", `part 2 "preload:/b.so": preload is set twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseVariant(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseVariants(t *testing.T) {
	if _, err := ParseVariants([]string{"a=prop:X=1"}); err == nil || !strings.Contains(err.Error(), "at least two") {
		t.Errorf("one variant: err = %v", err)
	}
	if _, err := ParseVariants([]string{"a=prop:X=1", "a=prop:X=2"}); err == nil || !strings.Contains(err.Error(), "variant a: the name is used twice") {
		t.Errorf("duplicate: err = %v", err)
	}
	vs, err := ParseVariants([]string{"a=", "b=prop:X=2"})
	if err != nil || len(vs) != 2 || vs[0].Name != "a" {
		t.Errorf("got %+v, %v", vs, err)
	}
}

func TestVariantEnviron(t *testing.T) {
	v, err := ParseVariant("memo=lib:/opt/memo,env:TBB_VERSION=1,env:HOME=/tmp/h")
	if err != nil {
		t.Fatal(err)
	}
	got := v.Environ([]string{"HOME=/root", "PATH=/bin", "OVRUN_OPENVINO_LIB=/old"})
	want := []string{"PATH=/bin", "HOME=/tmp/h", "OVRUN_OPENVINO_LIB=/opt/memo", "TBB_VERSION=1"}
	if !slices.Equal(got, want) {
		t.Errorf("Environ = %v, want %v", got, want)
	}
	if err := v.Check(); err == nil || !strings.Contains(err.Error(), "variant memo: lib:/opt/memo") {
		t.Errorf("Check = %v", err)
	}
}

func TestVariantPreload(t *testing.T) {
	dir := t.TempDir()
	so := filepath.Join(dir, "libmemo.so")
	if err := os.WriteFile(so, []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	v, err := ParseVariant("memo=preload:libmemo.so,env:OVTRACE_MEMO_VERIFY=1")
	if err != nil {
		t.Fatal(err)
	}
	if v.Preload != so {
		t.Errorf("Preload = %q, want the absolute %q", v.Preload, so)
	}
	if err := v.Check(); err != nil {
		t.Errorf("Check = %v", err)
	}
	got := v.Environ([]string{"PATH=/bin", "LD_PRELOAD=/usr/lib/libother.so"})
	want := []string{"PATH=/bin", "LD_PRELOAD=" + so + ":/usr/lib/libother.so", "OVTRACE_MEMO_VERIFY=1"}
	if !slices.Equal(got, want) {
		t.Errorf("Environ = %v, want %v", got, want)
	}
	if got := v.Environ([]string{"PATH=/bin"}); !slices.Contains(got, "LD_PRELOAD="+so) {
		t.Errorf("Environ without a previous LD_PRELOAD = %v", got)
	}
	for _, spec := range []string{"x=preload:" + dir, "x=preload:" + filepath.Join(dir, "none.so")} {
		v, err := ParseVariant(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Check(); err == nil || !strings.Contains(err.Error(), "variant x: preload:") {
			t.Errorf("%s: Check = %v", spec, err)
		}
	}
}

// FuzzParseVariants: any list of specs is refused with one line or gives
// variants whose environment a process can be started with.
func FuzzParseVariants(f *testing.F) {
	f.Add("base=", "memo=lib:/opt/memo,env:TBB_VERSION=1,prop:INFERENCE_PRECISION_HINT=f32")
	f.Add("a=prop:X=1", "a=prop:X=2")
	f.Add("a=env:OVRUN_OPENVINO_LIB=/x", "b=lib:")
	f.Add("=x", "b=prop:=1")
	f.Fuzz(func(t *testing.T, a, b string) {
		vs, err := ParseVariants([]string{a, b})
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		names := map[string]bool{}
		for _, v := range vs {
			if !variantName.MatchString(v.Name) || names[v.Name] {
				t.Fatalf("bad or repeated name %q", v.Name)
			}
			names[v.Name] = true
			for _, kv := range v.Environ(nil) {
				k, _, ok := strings.Cut(kv, "=")
				if !ok || k == "" || strings.ContainsRune(kv, 0) {
					t.Fatalf("variant %s: environment entry %q", v.Name, kv)
				}
			}
			for k := range v.Props {
				if k == "" {
					t.Fatalf("variant %s: empty property key", v.Name)
				}
			}
		}
	})
}
