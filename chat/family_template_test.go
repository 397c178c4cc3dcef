package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/testpy"
	"github.com/ovtoolkit/ovrun/model"
)

// familyCases add to cases the conversations a family's default template
// treats apart: a system message alone, before an assistant turn, and
// after the first turn.
var familyCases = append(append([]testCase{}, cases...),
	testCase{[]Message{{"system", "Be brief."}}, true},
	testCase{[]Message{{"system", "Be brief."}, {"assistant", "Hi."}, {"user", "Hello?"}}, true},
	testCase{[]Message{{"user", "Hi"}, {"system", "Switch to French."}, {"user", "Bonjour?"}}, false},
)

// TestFamilyTemplatesMatchJinja2: the chat template a family gives a
// checkpoint without one (model.Family.ChatTemplate: Gemma's turns)
// compiles, passes the probes, and renders as Python's jinja2 does.
func TestFamilyTemplatesMatchJinja2(t *testing.T) {
	templates := map[string]string{}
	for _, f := range model.Families() {
		if f.ChatTemplate != "" {
			templates[f.ModelType] = f.ChatTemplate
		}
	}
	if len(templates) == 0 {
		t.Skip("no family has a template of its own")
	}
	in, _ := json.Marshal(map[string]any{"templates": templates, "cases": familyCases})
	cmd := exec.Command(testpy.Python(t), filepath.Join("testdata", "reference.py"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("reference.py: %v\n%s", err, stderr.String())
	}
	var ref struct {
		Rendered map[string][]string `json:"rendered"`
	}
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatal(err)
	}
	for name, src := range templates {
		tmpl, err := Compile(src, "<s>", "</s>")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, c := range familyCases {
			got, err := tmpl.Render(context.Background(), c.Messages, c.AddGenerationPrompt)
			if err != nil {
				t.Fatalf("%s case %d: %v", name, i, err)
			}
			if want := ref.Rendered[name][i]; got != want {
				t.Errorf("%s case %d:\n got %q\nwant %q", name, i, got, want)
			}
		}
	}
	// Gemma's turns, the system message in front of the first user one.
	got, err := Compile(model.GemmaChatTemplate, "<bos>", "<eos>")
	if err != nil {
		t.Fatal(err)
	}
	text, err := got.Render(context.Background(), cases[1].Messages, true)
	want := "<bos><start_of_turn>user\nAnswer in one word.\n\nCapital of Italy?<end_of_turn>\n<start_of_turn>model\n"
	if err != nil || text != want {
		t.Errorf("Gemma: %q, %v; want %q", text, err, want)
	}
	if strings.Contains(text, "<|im_start|>") {
		t.Error("Gemma's template speaks ChatML")
	}
}
