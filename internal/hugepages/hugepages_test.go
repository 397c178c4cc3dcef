package hugepages

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestWithTunable(t *testing.T) {
	const madvise = "always [madvise] never\n"
	for _, c := range []struct {
		name, mode string
		env, want  []string
		ok         bool
	}{
		{"added", madvise, []string{"A=1"}, []string{"A=1", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}, true},
		{"appended to other tunables", madvise, []string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2", "B=2"},
			[]string{"GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1", "B=2"}, true},
		{"empty tunables", madvise, []string{"GLIBC_TUNABLES="}, []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=1"}, true},
		{"user's choice kept", madvise, []string{"GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}, nil, false},
		{"already set (the second start)", madvise, []string{"GLIBC_TUNABLES=x=1:glibc.malloc.hugetlb=1"}, nil, false},
		{"kernel gives them anyway", "[always] madvise never\n", []string{"A=1"}, nil, false},
		{"kernel gives none", "always madvise [never]\n", []string{"A=1"}, nil, false},
		{"no such file", "", []string{"A=1"}, nil, false},
	} {
		got, ok := withTunable(c.env, c.mode)
		if ok != c.ok {
			t.Errorf("%s: ok %v, want %v", c.name, ok, c.ok)
			continue
		}
		if !ok {
			if !slices.Equal(got, c.env) {
				t.Errorf("%s: env changed to %q", c.name, got)
			}
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestReexec runs this test binary as a program that calls Reexec and
// reports what the second start sees: the same arguments, the tunable set
// once, and On true.
func TestReexec(t *testing.T) {
	if os.Getenv("HUGEPAGES_CHILD") == "1" {
		Reexec()
		os.Stdout.WriteString(os.Getenv("GLIBC_TUNABLES") + "|" + strings.Join(os.Args[1:], " ") + "|")
		if On() {
			os.Stdout.WriteString("on")
		}
		os.Exit(0)
	}
	mode, err := os.ReadFile(thpMode)
	if err != nil || !strings.Contains(string(mode), "[madvise]") {
		t.Skipf("transparent huge pages are not in madvise mode here (%q, %v)", mode, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReexec$")
	cmd.Env = append(os.Environ(), "HUGEPAGES_CHILD=1", "GLIBC_TUNABLES=glibc.malloc.arena_max=4")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1|-test.run=^TestReexec$|on"
	if string(out) != want {
		t.Fatalf("second start saw %q, want %q", out, want)
	}
}
