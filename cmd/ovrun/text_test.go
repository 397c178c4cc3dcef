package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// The real model through the binary: its tokenizer, its chat template, its
// greedy answer, in text.

// The answer SmolLM2-135M-Instruct gives greedily at f32, recorded once.
const (
	colorsQuestion = "Name three primary colors."
	colorsAnswer   = "The primary colors are: Red, Blue, and Yellow."
	// colorsPrompt is colorsQuestion in SmolLM2's chat template, as chat
	// renders it (the template's own system turn included).
	colorsPrompt = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n" +
		"<|im_start|>user\n" + colorsQuestion + "<|im_end|>\n<|im_start|>assistant\n"
)

func TestTokenizeCommand(t *testing.T) {
	g := testenv.SmolLM2(t)
	// Ids from Hugging Face tokenizers over the same vocabulary (see
	// tokenizer/reference_test.go); <|im_start|> is one special token.
	out, stderr, code := ovrun(t, nil, "tokenize", "--model", g, "Hello, world! <|im_start|>user")
	if code != 0 || strings.TrimSpace(out) != "19556,28,905,17,216,1,4093" {
		t.Fatalf("tokenize: exit %d, %q (%s)", code, out, stderr)
	}
	out, stderr, code = ovrun(t, nil, "tokenize", "--model", g, "--decode", "19556,28,905,17,216,1,4093")
	if code != 0 || out != "Hello, world! <|im_start|>user\n" {
		t.Fatalf("tokenize --decode: exit %d, %q (%s)", code, out, stderr)
	}
	_, stderr, code = ovrun(t, nil, "tokenize", "--model", g, "--decode", "1,49152")
	assertOneLineError(t, stderr, code, "outside the vocabulary")
}

func TestChatAnswersInText(t *testing.T) {
	g := testenv.SmolLM2(t)
	var answers []string
	for _, weights := range []string{"native", "f32"} {
		js := filepath.Join(t.TempDir(), "chat.json")
		out, stderr, code := ovrunWith(t, nil, strings.NewReader(colorsQuestion+"\n"), "chat", "--model", g, "--precision", "f32",
			"--weights", weights, "--ladder", "64,128,256", "--json", js, "-q")
		if code != 0 {
			t.Fatalf("chat --weights %s: exit %d: %s", weights, code, stderr)
		}
		if strings.TrimSpace(out) != colorsAnswer {
			t.Errorf("chat --weights %s answered %q, want %q", weights, out, colorsAnswer)
		}
		s := readSummary(t, js)
		if s.FinishReason != "stop" || s.Text != colorsAnswer || s.Policy != "grow-one-ahead" {
			t.Errorf("summary: finish %q, text %q, policy %s", s.FinishReason, s.Text, s.Policy)
		}
		answers = append(answers, out)
	}
	if answers[0] != answers[1] {
		t.Errorf("compressed weights answered %q, f32 weights %q", answers[0], answers[1])
	}
	// One new token is the prompt's prediction alone: the answer's first word.
	js := filepath.Join(t.TempDir(), "one.json")
	out, stderr, code := ovrunWith(t, nil, strings.NewReader(colorsQuestion+"\n"), "chat", "--model", g, "--precision", "f32",
		"--ladder", "64,128", "--max-new-tokens", "1", "--json", js, "-q")
	if code != 0 || strings.TrimSpace(out) != "The" {
		t.Fatalf("chat --max-new-tokens 1: exit %d, %q (%s)", code, out, stderr)
	}
	if s := readSummary(t, js); s.FinishReason != "length" || s.DecodedTokens != 0 || len(s.Predictions) != 1 {
		t.Errorf("chat --max-new-tokens 1: finish %q after %d steps, %d predictions", s.FinishReason, s.DecodedTokens, len(s.Predictions))
	}
}

func TestGeneratePromptJSON(t *testing.T) {
	g := testenv.SmolLM2(t)
	js := filepath.Join(t.TempDir(), "gen.json")
	out, stderr, code := ovrun(t, nil, "generate", "--model", g, "--precision", "f32",
		"--prompt", colorsPrompt,
		"--max-new-tokens", "40", "--json", js)
	if code != 0 {
		t.Fatalf("generate: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		PromptIDs    []int  `json:"prompt_ids"`
		GeneratedIDs []int  `json:"generated_ids"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	// The same answer as chat's, ending at <|im_end|> (id 2).
	if r.Text != colorsAnswer {
		t.Errorf("text %q, want %q", r.Text, colorsAnswer)
	}
	if r.FinishReason != "stop" || len(r.GeneratedIDs) == 0 || r.GeneratedIDs[len(r.GeneratedIDs)-1] != 2 {
		t.Errorf("finish %q, generated %v: want a stop at <|im_end|> (2)", r.FinishReason, r.GeneratedIDs)
	}
	if r.PromptIDs[0] != 1 || !slices.Contains(r.PromptIDs, 4093) {
		t.Errorf("prompt ids %v: want <|im_start|> (1) and user (4093)", r.PromptIDs)
	}
	if r.Text == "" || strings.TrimSpace(out) != r.Text {
		t.Errorf("printed %q, recorded text %q", out, r.Text)
	}
	// Past the end-of-generation token with --ignore-eos: exactly N tokens.
	js2 := filepath.Join(t.TempDir(), "gen2.json")
	if _, stderr, code := ovrun(t, nil, "generate", "--model", g, "--prompt", "Once upon a time", "--ignore-eos",
		"--max-new-tokens", "12", "--json", js2); code != 0 {
		t.Fatalf("generate --ignore-eos: exit %d: %s", code, stderr)
	}
	b, _ = os.ReadFile(js2)
	r.GeneratedIDs = nil
	_ = json.Unmarshal(b, &r)
	if len(r.GeneratedIDs) != 12 || r.FinishReason != "length" {
		t.Errorf("--ignore-eos: %d tokens, finish %q; want 12, length", len(r.GeneratedIDs), r.FinishReason)
	}
}

func TestRunWithTextPrompt(t *testing.T) {
	g := testenv.SmolLM2(t)
	js := filepath.Join(t.TempDir(), "run.json")
	out, stderr, code := ovrun(t, nil, "run", "--model", g, "--precision", "f32", "--ladder", "40,64,128",
		"--policy", "grow-one-ahead", "--prompt", colorsPrompt, "--decode-tokens", "60", "--json", js)
	if code != 0 {
		t.Fatalf("run --prompt: exit %d: %s", code, stderr)
	}
	s := readSummary(t, js)
	if s.Text != colorsAnswer || !strings.HasPrefix(out, s.Text) || s.FinishReason != "stop" || len(s.Boundaries) == 0 {
		t.Errorf("run printed %q; summary text %q, finish %q", out, s.Text, s.FinishReason)
	}
	// A prompt longer than the largest rung: one line, before any compile.
	_, stderr, code = ovrun(t, nil, "run", "--model", g, "--ladder", "16,32", "--prompt", strings.Repeat("word ", 40))
	assertOneLineError(t, stderr, code, "largest rung holds 32")
}

// A tokenizer.json that does not fit the model is refused with one line.
func TestTokenizerThatDoesNotMatchTheModel(t *testing.T) {
	dir := copyCheckpoint(t, "tiny")
	// A byte-level BPE vocabulary larger than the tiny model's.
	vocab := map[string]int{}
	for i := range 5000 {
		vocab["t"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune(0x4e00+i))] = i
	}
	tj := map[string]any{
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"added_tokens":  []any{},
	}
	b, _ := json.Marshal(tj)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := ovrun(t, nil, "generate", "--model", dir, "--prompt", "hello", "--max-new-tokens", "2")
	assertOneLineError(t, stderr, code, "tokenizer")
}

// TestGenerateWeightsRounded runs GenAI's form of the GGUF file through the
// binary: the summary names the format and its smaller blob, and a format
// that does not exist is one line naming the choices.
func TestGenerateWeightsRounded(t *testing.T) {
	g := testenv.SmolLM2(t)
	sizes := map[string]int64{}
	for _, weights := range []string{"native", "rounded"} {
		js := filepath.Join(t.TempDir(), weights+".json")
		_, stderr, code := ovrun(t, nil, "generate", "--model", g, "--weights", weights, "--prompt", colorsPrompt,
			"--max-new-tokens", "4", "--capacity", "128", "--json", js)
		if code != 0 {
			t.Fatalf("generate --weights %s: exit %d: %s", weights, code, stderr)
		}
		b, err := os.ReadFile(js)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Weights     string `json:"weights"`
			WeightBytes int64  `json:"weight_bytes"`
			Generated   []int  `json:"generated_ids"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if r.Weights != weights || len(r.Generated) != 4 {
			t.Errorf("generate --weights %s: summary says weights %q, %d tokens", weights, r.Weights, len(r.Generated))
		}
		sizes[weights] = r.WeightBytes
	}
	// A u8 zero point per group of 32 instead of an f32 one.
	if sizes["rounded"] >= sizes["native"] {
		t.Errorf("rounded blob %d bytes, native %d: want smaller", sizes["rounded"], sizes["native"])
	}
	_, stderr, code := ovrun(t, nil, "generate", "--model", g, "--weights", "u4", "--prompt-tokens", "4")
	assertOneLineError(t, stderr, code, "want native, rounded, f32, kernel or kernel-q8")
}
