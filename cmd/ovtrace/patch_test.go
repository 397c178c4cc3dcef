package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/app/compilebench"
	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// dyncastMemo builds patches/dyncast-memo with the system compiler and runs
// its own check (the same cast results with and without the shim), and
// returns the shim's path.
func dyncastMemo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no C++ compiler (g++) to build patches/dyncast-memo")
	}
	dir := filepath.Join(testenv.RepoRoot(t), "patches", "dyncast-memo")
	out, err := exec.Command("make", "--no-print-directory", "-C", dir, "check").CombinedOutput()
	if err != nil {
		t.Fatalf("make -C %s check: %v\n%s", dir, err, out)
	}
	if !strings.Contains(string(out), "mismatches 0") {
		t.Fatalf("the shim's check printed no clean verification:\n%s", out)
	}
	return filepath.Join(dir, "build", "libdyncast_memo.so")
}

// TestABPreloadedPatch is the path of patches/dyncast-memo end to end: the
// shim preloaded into the treatment's compiles must answer casts (hits), agree
// with libstdc++ on every verified hit, and leave the compiled model
// byte-identical and the logits bitwise equal.
func TestABPreloadedPatch(t *testing.T) {
	so := dyncastMemo(t)
	path := filepath.Join(t.TempDir(), "ab.json")
	out, err := ovtrace(t, "ab", "--model", tiny(t), "--capacity", "32", "--pairs", "2", "--allow-small",
		"--variant", "base=", "--variant", "memo=preload:"+so+",env:OVTRACE_MEMO_VERIFY=1", "--json", path, "-q")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep compilebench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.FinishReason != "complete" || len(rep.Trials) != 4 || rep.Variants[1].Preload != so {
		t.Fatalf("finish %s, %d trials, variants %+v", rep.FinishReason, len(rep.Trials), rep.Variants)
	}
	e := rep.Equivalent
	if e == nil || e.Compiled == nil {
		t.Fatalf("no compiled-model evidence: %+v", e)
	}
	if !e.Compiled.Equal || !e.Compiled.Deterministic || e.Compiled.Runs != 6 || !e.Equal || e.MaxAbsDiff != 0 {
		t.Errorf("the patch changed what was compiled: compiled %+v, logits %s", e.Compiled, e.Detail)
	}
	for _, tr := range append(rep.Warmup, rep.Trials...) {
		if len(tr.ExportSHA256) != 64 {
			t.Errorf("run %+v exported no model", tr)
		}
		if (tr.Memo != nil) != (tr.Variant == "memo") {
			t.Errorf("run %s: memo counters %+v", tr.Variant, tr.Memo)
		}
	}
	if len(rep.Memo) != 1 {
		t.Fatalf("memo summaries %+v, want the treatment's", rep.Memo)
	}
	m := rep.Memo[0]
	c := m.Counters
	if m.Variant != "memo" || m.Patch != "dyncast-memo" || m.Trials != 2 || c["calls"] == 0 || c["hits"] == 0 ||
		c["calls"] != c["hits"]+c["misses"] || c["verified"] != c["hits"] || c["mismatches"] != 0 {
		t.Errorf("memo summary %+v", m)
	}
	t.Logf("%s", out)
	for _, want := range []string{"equivalence: identical compiled models (all 6 exported compiled models are byte-identical", "memo: memo (dyncast-memo): "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
