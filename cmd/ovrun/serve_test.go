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
// prompt too long for the ladder, then SIGTERM and a clean exit.
func TestServeWithOpenAIClient(t *testing.T) {
	g := testenv.SmolLM2(t)
	traces := filepath.Join(t.TempDir(), "serve.otlp.json")
	cmd := exec.Command(ovrunBin, "serve", "--model", g, "--precision", "f32", "--addr", "127.0.0.1:0",
		"--ladder", "64,128,256", "--max-seqs", "4", "--trace-out", traces)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var base string
	addr := regexp.MustCompile(`listening on (http://\S+)`)
	for base == "" || !strings.Contains(base, "ready") {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("ovrun serve exited before it was ready")
			}
			if m := addr.FindStringSubmatch(l); m != nil {
				base = m[1]
			}
			if strings.Contains(l, "ready after") {
				base += " ready"
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("ovrun serve was not ready within 2 minutes")
		}
	}
	base = strings.TrimSuffix(base, " ready")
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
	for _, want := range []string{"ovrun_kv_reserved_bytes 0", "ovrun_kv_live_bytes 0", "ovrun_compiles_total{capacity=\"64\",kind=\"decode\",outcome=\"ok\"} 1\n",
		`ovrun_requests_total{code="200",endpoint="chat"} 7`, `ovrun_requests_total{code="400",endpoint="completions"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Every series the Grafana serving dashboard plots exists.
	dash, err := os.ReadFile(filepath.Join("..", "..", "dashboards", "ovrun-serve.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`ovrun_[a-z_]+`).FindAllString(string(dash), -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count")
		if !strings.Contains(string(metrics), "# HELP "+base+" ") {
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
	// One trace per request that reached the engine (3+4 chats, 1 completion).
	spans, err := tracing.ReadTraceFile(traces)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, s := range spans {
		if s.Name == "ovrun.run" {
			ids[s.TraceID] = true
		}
	}
	if len(ids) != 8 {
		t.Errorf("%d request traces, want 8", len(ids))
	}
}
