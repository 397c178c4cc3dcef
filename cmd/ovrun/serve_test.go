package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/internal/testenv"
	"github.com/ovtoolkit/ovrun/tracing"
)

// ovrun serve with the real model, driven by the real openai Python client:
// models, chat (whole, streamed, with a stop sequence) and completions, a
// prompt too long for the ladder, then SIGTERM and a clean exit; with
// continuous batching and with a sequence per request.
func TestServeWithOpenAIClient(t *testing.T) {
	for _, mode := range []string{"on", "off"} {
		t.Run("batching="+mode, func(t *testing.T) { testServeWithOpenAIClient(t, mode == "on") })
	}
}

func testServeWithOpenAIClient(t *testing.T, batching bool) {
	g := testenv.SmolLM2(t)
	traces := filepath.Join(t.TempDir(), "serve.otlp.json")
	mode := map[bool]string{true: "on", false: "off"}[batching]
	cmd, base, lines := startServe(t, nil, "--model", g, "--precision", "f32", "--ladder", "64,128,256",
		"--max-seqs", "4", "--trace-out", traces, "--batching", mode)
	out, err := exec.Command(testenv.Python(t), filepath.Join("testdata", "openai_client.py"), base, colorsQuestion).CombinedOutput()
	if err != nil {
		t.Fatalf("openai client: %v\n%s", err, out)
	}
	var got struct {
		Models           []string `json:"models"`
		Chat             string   `json:"chat"`
		ChatFinish       string   `json:"chat_finish"`
		ChatStream       string   `json:"chat_stream"`
		ChatStop         string   `json:"chat_stop"`
		Completion       string   `json:"completion"`
		CompletionFinish string   `json:"completion_finish"`
		TooLong          any      `json:"too_long"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(got.Models) != 1 || got.Models[0] != "SmolLM2-135M-Instruct.Q4_1" {
		t.Errorf("models %q", got.Models)
	}
	// The same greedy answer as ovrun chat gives (TestChatAnswersInText).
	if got.Chat != colorsAnswer || got.ChatFinish != "stop" || got.ChatStream != colorsAnswer {
		t.Errorf("chat %q (%s), streamed %q; want %q", got.Chat, got.ChatFinish, got.ChatStream, colorsAnswer)
	}
	if got.ChatStop != "The primary colors are: Red," {
		t.Errorf("chat with stop \" Blue\": %q", got.ChatStop)
	}
	if got.Completion == "" || got.CompletionFinish != "length" {
		t.Errorf("completion %q finish %q, want 5 tokens and length", got.Completion, got.CompletionFinish)
	}
	if got.TooLong != float64(400) {
		t.Errorf("a prompt longer than the ladder: %v, want 400", got.TooLong)
	}
	// Four sequences at once on the shared ladder answer as each does alone.
	questions := map[string]string{colorsQuestion: colorsAnswer, "What is the capital of France?": "The capital of France is Paris."}
	var wg sync.WaitGroup
	for q, want := range questions {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := fmt.Sprintf(`{"temperature":0,"messages":[{"role":"user","content":%q}]}`, q)
				resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				var r struct {
					Choices []struct{ Message struct{ Content string } }
				}
				if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Choices) != 1 || r.Choices[0].Message.Content != want {
					t.Errorf("concurrent %q: %d %+v %v, want %q", q, resp.StatusCode, r, err, want)
				}
			}()
		}
	}
	wg.Wait()
	// Every sequence finished: no KV reserved; the first rung was compiled
	// once for all requests (the shared ladder keeps it).
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wants := []string{"ovrun_kv_reserved_bytes 0", "ovrun_kv_live_bytes 0", "ovrun_compiles_total{capacity=\"64\",kind=\"decode\",outcome=\"ok\"} 1\n",
		`ovrun_requests_total{code="200",endpoint="chat"} 7`, `ovrun_requests_total{code="400",endpoint="completions"} 1`}
	if batching { // the pool stays committed; no block is held
		wants = append(wants[1:2], wants[3:]...)
		wants = append(wants, "ovrun_compiles_total{capacity=\"64\",kind=\"batch\",outcome=\"ok\"} 1\n", `ovrun_kv_blocks{state="used"} 0`)
	}
	for _, want := range wants {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Every series the Grafana serving dashboard plots exists.
	dash, err := os.ReadFile(filepath.Join("..", "..", "dashboards", "ovrun-serve.json"))
	if err != nil {
		t.Fatal(err)
	}
	// (Each engine lacks the other's own series: boundary waits are a
	// sequence's per request, steps and blocks the batched engine's.)
	own := regexp.MustCompile(`^ovrun_(batch_|kv_blocks|prefix_cache_)`)
	if batching {
		own = regexp.MustCompile(`^ovrun_boundary_wait_`)
	}
	for _, name := range regexp.MustCompile(`ovrun_[a-z_]+`).FindAllString(string(dash), -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
		if !own.MatchString(base) && !strings.Contains(string(metrics), "# HELP "+base+" ") {
			t.Errorf("dashboards/ovrun-serve.json plots %s, which /metrics does not have", name)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for range lines {
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ovrun serve did not exit within 30 s of SIGTERM")
	}
	// One trace per request that reached the engine (3+4 chats, 1
	// completion); batched, a span per step linked to the requests it carried.
	spans, err := tracing.ReadTraceFile(traces)
	if err != nil {
		t.Fatal(err)
	}
	root := tracing.SpanRun
	if batching {
		root = tracing.SpanRequest
	}
	ids, steps, linked := map[string]bool{}, 0, map[string]bool{}
	for _, s := range spans {
		switch s.Name {
		case root:
			ids[s.TraceID] = true
		case tracing.SpanBatchStep:
			steps++
			for _, l := range s.Links {
				linked[l.TraceID] = true
			}
		}
	}
	if len(ids) != 8 {
		t.Errorf("%d request traces, want 8", len(ids))
	}
	if batching && (steps == 0 || len(linked) != 8) {
		t.Errorf("%d step spans linked to %d request traces, want some linked to all 8", steps, len(linked))
	}
}

// startServe starts ovrun serve on a free loopback port and waits until it
// is ready; lines carries its standard error from then on.
func startServe(t *testing.T, env []string, args ...string) (*exec.Cmd, string, chan string) {
	t.Helper()
	cmd := exec.Command(ovrunBin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var base string
	addr := regexp.MustCompile(`listening on (http://\S+)`)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("ovrun serve exited before it was ready")
			}
			if m := addr.FindStringSubmatch(l); m != nil {
				base = m[1]
			}
			if strings.Contains(l, "ready after") {
				return cmd, base, lines
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("ovrun serve was not ready within 2 minutes")
		}
	}
}

// chatOnce sends one greedy chat request and returns the status and the
// answer (or the error message).
func chatOnce(t *testing.T, base, question string, maxTokens int) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"temperature":0,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, question)
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Choices []struct{ Message struct{ Content string } }
		Error   struct{ Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if len(r.Choices) == 1 {
		return resp.StatusCode, r.Choices[0].Message.Content
	}
	return resp.StatusCode, r.Error.Message
}

// Faults while serving: a rung whose compile fails (twice: in the
// background and in the foreground retry) fails only the request that
// needs it, with a clear error, and the server goes on; SIGTERM lets a
// request in flight finish before the process exits 0.
func TestServeFaults(t *testing.T) {
	g := testenv.SmolLM2(t)
	long := "Explain in a few paragraphs how a compiler turns source code into machine code."
	cmd, base, lines := startServe(t, []string{"OVRUN_FAIL_COMPILE=128x2"}, "--model", g, "--precision", "f32",
		"--ladder", "64,128,256", "--max-seqs", "2")
	if code, ans := chatOnce(t, base, colorsQuestion, 20); code != 200 || ans != colorsAnswer {
		t.Fatalf("a request within rung 64: %d %q", code, ans)
	}
	if code, msg := chatOnce(t, base, long, 150); code != http.StatusInternalServerError || !strings.Contains(msg, "compile") {
		t.Errorf("a request that needs the failing rung 128: %d %q, want 500 naming the compile", code, msg)
	}
	if code, ans := chatOnce(t, base, colorsQuestion, 20); code != 200 || ans != colorsAnswer {
		t.Errorf("after the failed compile: %d %q", code, ans)
	}
	// SIGTERM while a long answer streams: it finishes, then the process exits 0.
	body := fmt.Sprintf(`{"temperature":0,"max_tokens":60,"stream":true,"messages":[{"role":"user","content":%q}]}`, long)
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Scan() // the first event: the request is in flight
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	last := ""
	for sc.Scan() {
		if sc.Text() != "" {
			last = sc.Text()
		}
	}
	resp.Body.Close()
	if last != "data: [DONE]" {
		t.Errorf("the stream in flight at SIGTERM ended with %q, want data: [DONE]", last)
	}
	go func() {
		for range lines {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("no exit within 30 s of SIGTERM")
	}
}
