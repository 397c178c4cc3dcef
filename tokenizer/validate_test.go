package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestFromGGUFRejectsBadVocab: every inconsistency is one error wrapping
// ErrInvalid or ErrUnsupported, never a panic or a half-built tokenizer.
func TestFromGGUFRejectsBadVocab(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(v *GGUFVocab)
		want   error
		substr string
	}{
		{"unknown model", func(v *GGUFVocab) { v.Model = "bert" }, ErrUnsupported, `"bert"`},
		{"unknown pre", func(v *GGUFVocab) { v.Pre = "tekken" }, ErrUnsupported, `"tekken"`},
		{"no tokens", func(v *GGUFVocab) { v.Tokens, v.TokenTypes = nil, nil }, ErrInvalid, "0 tokens"},
		{"merge names unknown token", func(v *GGUFVocab) { v.Merges = append(v.Merges, "Ġt zzz") }, ErrInvalid, `"zzz"`},
		{"merge result unknown", func(v *GGUFVocab) { v.Merges = append(v.Merges, "a b") }, ErrInvalid, `"ab"`},
		{"merge without space", func(v *GGUFVocab) { v.Merges = append(v.Merges, "ab") }, ErrInvalid, "separated by a space"},
		{"empty merge", func(v *GGUFVocab) { v.Merges = append(v.Merges, "") }, ErrInvalid, "separated by a space"},
		{"types length", func(v *GGUFVocab) { v.TokenTypes = v.TokenTypes[:3] }, ErrInvalid, "token types"},
		{"scores length", func(v *GGUFVocab) { v.Scores = []float32{1} }, ErrInvalid, "scores"},
		{"bad type", func(v *GGUFVocab) { v.TokenTypes[5] = 9 }, ErrInvalid, "type 9"},
		{"bos out of range", func(v *GGUFVocab) { v.BOS = len(v.Tokens) }, ErrInvalid, "bos"},
		{"eot below -1", func(v *GGUFVocab) { v.EOT = -2 }, ErrInvalid, "eot"},
		{"add bos without bos", func(v *GGUFVocab) { v.BOS, v.AddBOS = -1, true }, ErrInvalid, "add_bos"},
		{"duplicate token", func(v *GGUFVocab) { v.Tokens[4] = v.Tokens[5] }, ErrInvalid, "both id"},
		{"huge token", func(v *GGUFVocab) { v.Tokens[4] = strings.Repeat("x", maxTokenBytes+1) }, ErrInvalid, "bytes long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := toyBPEVocab()
			v.Tokens = slices.Clone(v.Tokens)
			v.TokenTypes = slices.Clone(v.TokenTypes)
			tt.edit(&v)
			tok, err := FromGGUF(v)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.substr) || tok != nil {
				t.Errorf("FromGGUF = %v, %v; want an error wrapping %v mentioning %s", tok, err, tt.want, tt.substr)
			}
		})
	}
	v := toySPMVocab()
	v.Tokens = slices.Clone(v.Tokens)
	v.Tokens[5] = "<0xZZ>"
	if _, err := FromGGUF(v); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad byte token: %v", err)
	}
}

func TestCheckVocabSize(t *testing.T) {
	tok := mustTokenizer(t, toyBPEVocab())
	n := tok.VocabSize()
	for _, tc := range []struct {
		model int
		ok    bool
	}{{n, true}, {n + 128, true}, {n - 1, false}, {0, false}, {-5, false}} {
		err := tok.CheckVocabSize(tc.model)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrVocabMismatch)) {
			t.Errorf("CheckVocabSize(%d) with %d ids = %v", tc.model, n, err)
		}
	}
}

// toyHFJSON is a minimal byte-level tokenizer.json over the toy vocabulary.
func toyHFJSON() map[string]any {
	v := toyBPEVocab()
	vocab := map[string]int{}
	for id, tok := range v.Tokens {
		vocab[tok] = id
	}
	var added []any
	for id := range 3 {
		added = append(added, map[string]any{"id": id, "content": v.Tokens[id], "special": true})
	}
	return map[string]any{
		"added_tokens": added,
		"normalizer":   nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Digits", "individual_digits": true},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		}},
		"post_processor": map[string]any{"type": "ByteLevel"},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": v.Merges},
	}
}

func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFromHFJSONMatchesFromGGUF: the same vocabulary through either door
// gives the same ids; a tokenizer_config.json next to the file names EOS.
func TestFromHFJSONMatchesFromGGUF(t *testing.T) {
	dir := t.TempDir()
	path := writeJSON(t, dir, "tokenizer.json", toyHFJSON())
	writeJSON(t, dir, "tokenizer_config.json", map[string]any{
		"bos_token": nil, "eos_token": map[string]any{"content": "<|im_end|>"}})
	hf, err := FromHFJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	gg := mustTokenizer(t, toyBPEVocab())
	for _, c := range namedCases {
		if a, b := hf.Encode(c.text, true), gg.Encode(c.text, false); !slices.Equal(a, b) {
			t.Errorf("%s: FromHFJSON %v, FromGGUF %v", c.name, a, b)
		}
	}
	if hf.EOS() != 2 || !hf.IsEOG(2) || !hf.IsEOG(0) || hf.BOS() != -1 {
		t.Errorf("EOS %d BOS %d IsEOG(2) %v", hf.EOS(), hf.BOS(), hf.IsEOG(2))
	}
}

// TestFromHFJSONRejectsBadFiles covers bad JSON, inconsistent vocabularies,
// unsupported models and files that are not regular or too large.
func TestFromHFJSONRejectsBadFiles(t *testing.T) {
	edit := func(f func(m map[string]any)) any {
		m := toyHFJSON()
		f(m)
		return m
	}
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	tests := []struct {
		name    string
		content any // marshalled, or []byte written as is
		want    error
	}{
		{"not json", []byte("{\"model\": "), ErrInvalid},
		{"wrong shape", []byte(`{"model": [1, 2]}`), ErrInvalid},
		{"no model", []byte(`{}`), ErrInvalid},
		{"wordpiece", edit(func(m map[string]any) { model(m)["type"] = "WordPiece" }), ErrUnsupported},
		{"byte fallback", edit(func(m map[string]any) { model(m)["byte_fallback"] = true }), ErrUnsupported},
		{"unknown merge token", edit(func(m map[string]any) { model(m)["merges"] = []string{"Ġt zz"} }), ErrInvalid},
		{"merge pair of three", edit(func(m map[string]any) { model(m)["merges"] = [][]string{{"a", "b", "c"}} }), ErrInvalid},
		{"negative id", edit(func(m map[string]any) { model(m)["vocab"].(map[string]int)["neg"] = -1 }), ErrInvalid},
		{"absurd id", edit(func(m map[string]any) { model(m)["vocab"].(map[string]int)["big"] = 1 << 40 }), ErrInvalid},
		{"shared id", edit(func(m map[string]any) { model(m)["vocab"].(map[string]int)["again"] = 7 }), ErrInvalid},
		{"added token clash", edit(func(m map[string]any) {
			m["added_tokens"] = append(m["added_tokens"].([]any), map[string]any{"id": 7, "content": "<x>"})
		}), ErrInvalid},
		{"no pre-tokenizer", edit(func(m map[string]any) { m["pre_tokenizer"] = nil }), ErrUnsupported},
		{"metaspace", edit(func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }), ErrUnsupported},
		{"bad regex", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(unclosed"}, "behavior": "Isolated"},
				map[string]any{"type": "ByteLevel"}}}
		}), ErrInvalid},
		{"split removed", edit(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "Removed"},
				map[string]any{"type": "ByteLevel"}}}
		}), ErrUnsupported},
		{"lowercase normalizer", edit(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} }), ErrUnsupported},
		{"template unknown token", edit(func(m map[string]any) {
			m["post_processor"] = map[string]any{"type": "TemplateProcessing",
				"single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>"}}}}
		}), ErrInvalid},
		{"deep nesting", edit(func(m map[string]any) {
			var p any = map[string]any{"type": "ByteLevel"}
			for range maxNesting + 2 {
				p = map[string]any{"type": "Sequence", "pretokenizers": []any{p}}
			}
			m["pre_tokenizer"] = p
		}), ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "tokenizer.json")
			if b, ok := tt.content.([]byte); ok {
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				writeJSON(t, dir, "tokenizer.json", tt.content)
			}
			tok, err := FromHFJSON(path)
			if !errors.Is(err, tt.want) || tok != nil {
				t.Errorf("FromHFJSON = %v, %v; want an error wrapping %v", tok, err, tt.want)
			}
		})
	}

	t.Run("directory", func(t *testing.T) {
		if _, err := FromHFJSON(t.TempDir()); !errors.Is(err, ErrInvalid) {
			t.Errorf("directory: %v", err)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "tokenizer.json")
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skip("mkfifo:", err)
		}
		if _, err := FromHFJSON(p); !errors.Is(err, ErrInvalid) { // must not block on open
			t.Errorf("fifo: %v", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "tokenizer.json")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(maxJSONBytes + 1); err != nil { // sparse: nothing written
			t.Fatal(err)
		}
		f.Close()
		if _, err := FromHFJSON(p); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "limit") {
			t.Errorf("too large: %v", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := FromHFJSON(filepath.Join(t.TempDir(), "none.json")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("missing: %v", err)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		dir := t.TempDir()
		path := writeJSON(t, dir, "tokenizer.json", toyHFJSON())
		writeJSON(t, dir, "tokenizer_config.json", map[string]any{"eos_token": "<|nope|>"})
		if _, err := FromHFJSON(path); !errors.Is(err, ErrInvalid) {
			t.Errorf("config naming an unknown token: %v", err)
		}
	})
}

// TestSpecialTokenFlags: lstrip/rstrip added tokens swallow the whitespace
// next to them, EncodeOrdinary leaves control tokens as text but still cuts
// out non-special added tokens.
func TestSpecialTokenFlags(t *testing.T) {
	m := toyHFJSON()
	vocab := m["model"].(map[string]any)["vocab"].(map[string]int)
	n := int64(len(vocab))
	m["added_tokens"] = append(m["added_tokens"].([]any),
		map[string]any{"id": n, "content": "<mask>", "special": true, "lstrip": true, "rstrip": true},
		map[string]any{"id": n + 1, "content": "<tool>", "special": false})
	path := writeJSON(t, t.TempDir(), "tokenizer.json", m)
	tok, err := FromHFJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode("a  <mask>  b", false)
	if want := []int64{int64(vocab["a"]), n, int64(vocab["b"])}; !slices.Equal(ids, want) {
		t.Errorf("lstrip/rstrip: %v, want %v", ids, want)
	}
	ord := tok.EncodeOrdinary("<|im_end|><tool>")
	if slices.Contains(ord, 2) || !slices.Contains(ord, n+1) || tok.Decode(ord) != "<|im_end|><tool>" {
		t.Errorf("EncodeOrdinary = %v", ord)
	}
	if !tok.IsSpecial(n) || !tok.IsSpecial(n+1) || tok.IsSpecial(int64(vocab["a"])) {
		t.Error("IsSpecial wrong for added tokens")
	}
}
