package main

// Pre-tokenizer patterns that backtrack catastrophically (issue item
// "Tokenizer regexes"), through the binary: a checkpoint whose
// tokenizer.json splits on one is refused at load with one line, within
// seconds, where it used to hang `tokenize`, `chat` and `serve` on 100
// bytes and ignore SIGTERM.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// byteLevelVocab is the 256 single-byte tokens of a byte-level BPE
// vocabulary, in GPT-2's printable spelling of bytes.
func byteLevelVocab() map[string]int {
	vocab := map[string]int{}
	next := 256
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae) {
			r = rune(next)
			next++
		}
		vocab[string(r)] = b
	}
	return vocab
}

// splitCheckpoint is the tiny checkpoint with a tokenizer.json that splits
// on pattern before its byte-level BPE.
func splitCheckpoint(t *testing.T, pattern string) string {
	t.Helper()
	dir := copyCheckpoint(t, "tiny")
	tj := map[string]any{
		"model": map[string]any{"type": "BPE", "vocab": byteLevelVocab(), "merges": []string{}},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}},
		"added_tokens": []any{},
	}
	b, err := json.Marshal(tj)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestHostileSplitPatternIsRefused(t *testing.T) {
	a99 := strings.Repeat("a", 99)
	for _, tc := range []struct{ pattern, text, reason string }{
		{`(a+)+$`, a99 + "!", "nested quantifiers"},
		{`(a|aa)+b`, a99 + "c", "alternation"},
		{`(\w+\s?)*$`, a99 + "!", "nested quantifiers"},
	} {
		t.Run(tc.pattern, func(t *testing.T) {
			dir := splitCheckpoint(t, tc.pattern)
			start := time.Now()
			_, stderr, code := ovrunIn(t, 20*time.Second, "", nil, "tokenize", "--model", dir, tc.text)
			assertOneLineError(t, stderr, code, strconv.Quote(tc.pattern)+" backtracks catastrophically")
			if !strings.Contains(stderr, tc.reason) {
				t.Errorf("stderr %q does not give the reason %q", stderr, tc.reason)
			}
			t.Logf("refused in %v", time.Since(start))
		})
	}
}

// A pattern from the file that needs the backtracking engine (lookahead)
// and is not hostile still tokenizes, and the ids spell the text.
func TestLookaheadSplitPatternTokenizes(t *testing.T) {
	dir := splitCheckpoint(t, `\w+(?=\s|$)|\s+|[^\w\s]+|\w+`)
	text := "Hello, wörld: 42 " + strings.Repeat("a", 99) + "!"
	out, stderr, code := ovrunIn(t, 20*time.Second, "", nil, "tokenize", "--model", dir, text)
	if code != 0 {
		t.Fatalf("tokenize: exit %d: %s", code, stderr)
	}
	ids := strings.TrimSpace(out)
	back, stderr, code := ovrunIn(t, 20*time.Second, "", nil, "tokenize", "--model", dir, "--decode", ids)
	if code != 0 || strings.TrimSuffix(back, "\n") != text {
		t.Errorf("--decode %s: exit %d, %q (stderr %q), want %q", ids, code, back, stderr, text)
	}
}
