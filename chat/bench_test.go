package chat

import (
	"context"
	"testing"

	"github.com/ardanlabs/jinja"
)

// BenchmarkRender is a four-turn conversation in the Llama 3 template,
// through a worker and in this process: the difference is the sandbox's
// cost per render.
func BenchmarkRender(b *testing.B) {
	msgs := probes[0]
	b.Run("worker", func(b *testing.B) {
		tmpl, err := Compile(llama3, "<s>", "</s>")
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := tmpl.Render(context.Background(), msgs, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("in-process", func(b *testing.B) {
		jt, err := jinja.Compile(llama3)
		if err != nil {
			b.Fatal(err)
		}
		req := &request{Messages: msgs, AddGenerationPrompt: true, BOS: "<s>", EOS: "</s>"}
		for b.Loop() {
			if _, _, err := render(jt, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWorkerStart is starting a worker until it is ready, and
// stopping it: what the first render, and the first after a crash, pay.
func BenchmarkWorkerStart(b *testing.B) {
	for b.Loop() {
		w, err := startWorker(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		w.stop()
	}
}

// BenchmarkCompile is Compile of the Llama 3 template: the compile and
// the two probe renders in a worker.
func BenchmarkCompile(b *testing.B) {
	for b.Loop() {
		if _, err := Compile(llama3, "<s>", "</s>"); err != nil {
			b.Fatal(err)
		}
	}
}
