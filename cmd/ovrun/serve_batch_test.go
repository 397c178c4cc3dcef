package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// TestServeBatchedMatchesAlone sends sixteen greedy completions at once to
// a batched server, joining at different moments with different lengths so
// that prompts are chunked beside other sequences' decode steps and
// sequences cross the rungs 64 and 128 mid-batch, while a ninth, streamed,
// is dropped by its client half way. Each answer equals the same request
// sent alone afterwards (which also reads its prompt's blocks back from the
// prefix cache), and at the end no KV block is held. The static form (the
// NPU's: a graph per rung and batch size) does the same with its own
// graphs, sequences moving into the next rung's batch as they grow.
func TestServeBatchedMatchesAlone(t *testing.T) {
	g := testenv.SmolLM2(t)
	t.Run("paged", func(t *testing.T) {
		testServeBatchedMatchesAlone(t, true, 16, "--model", g, "--precision", "f32", "--ladder", "64,128,256",
			"--max-seqs", "16", "--max-batch-tokens", "32", "--batching", "on", "--prefix-cache", "256MiB")
	})
	t.Run("static", func(t *testing.T) {
		testServeBatchedMatchesAlone(t, false, 8, "--model", g, "--precision", "f32", "--ladder", "64,128,256",
			"--max-seqs", "8", "--attention", "static", "--batching", "on")
	})
}

func testServeBatchedMatchesAlone(t *testing.T, paged bool, n int, args ...string) {
	_, base, _ := startServe(t, nil, args...)
	prompts := []string{
		"The capital of France is", "Write a haiku about the sea:", "List three primary colors:",
		"Once upon a time, in a land far away, there lived a", "def fibonacci(n):",
		"The quick brown fox", "Explain gravity to a child in two sentences. Gravity is",
		strings.Repeat("Count with me: one, two, three, four, five, six. ", 4),
		"import numpy as np\n\ndef softmax(x):", "My favourite season is autumn because",
		"Q: What is two plus two?\nA:", "The three laws of motion are", "Dear diary, today I",
		"A recipe for pancakes:\n1.", "SELECT name FROM users WHERE", "The history of the printing press",
	}[:n]
	complete := func(i int) string {
		body := fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0}`, prompts[i], 40+13*i)
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return ""
		}
		defer resp.Body.Close()
		var r struct{ Choices []struct{ Text string } }
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 || len(r.Choices) != 1 {
			t.Errorf("prompt %d: %d %v", i, resp.StatusCode, err)
			return ""
		}
		return r.Choices[0].Text
	}
	together := make([]string, len(prompts))
	var wg sync.WaitGroup
	for i := range prompts {
		wg.Go(func() {
			time.Sleep(time.Duration(i%4) * 150 * time.Millisecond)
			together[i] = complete(i)
		})
	}
	wg.Go(func() { // a streamed request whose client goes away after a few tokens
		body := `{"prompt":"Tell me a long story about dragons.","max_tokens":200,"temperature":0,"stream":true}`
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		sc := bufio.NewScanner(resp.Body)
		for n := 0; n < 10 && sc.Scan(); {
			if strings.HasPrefix(sc.Text(), "data: ") {
				n++
			}
		}
		resp.Body.Close()
	})
	wg.Wait()
	for i := range prompts {
		if alone := complete(i); together[i] != alone {
			t.Errorf("prompt %d batched:\n%q\nalone:\n%q", i, together[i], alone)
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wants := []string{`ovrun_kv_blocks{state="used"} 0`, "ovrun_kv_live_bytes 0", `ovrun_compiles_total{capacity="128",kind="batch",outcome="ok"} 1`}
	if !paged { // variants of several batch sizes at the first rung
		wants = []string{`ovrun_kv_blocks{state="used"} 0`, "ovrun_kv_live_bytes 0", `ovrun_compiles_total{capacity="128",kind="batch",outcome="ok"}`,
			`ovrun_compiles_total{capacity="64",kind="batch",outcome="ok"} 4`}
	}
	for _, want := range wants {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if paged && strings.Contains(string(m), `ovrun_prefix_cache_tokens_total{result="hit"} 0`) {
		t.Error("the requests sent alone hit nothing in the prefix cache")
	}
}
