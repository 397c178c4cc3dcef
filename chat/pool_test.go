package chat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"

	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// inProcess renders src the way the worker does, in this process: the
// reference for templates known to be harmless.
func inProcess(t testing.TB, src string, msgs []Message, agp bool) string {
	t.Helper()
	jt, err := jinja.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	out, limit, err := render(jt, &request{Messages: msgs, AddGenerationPrompt: agp, BOS: "<s>", EOS: "</s>"})
	if err != nil || limit != "" {
		t.Fatalf("in process: %v %s", err, limit)
	}
	return out
}

// Concurrent renders of two templates, some of them crashing their
// worker, each get their own answer.
func TestConcurrentRenders(t *testing.T) {
	good, err := Compile(llama3, "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := Compile(bomb, "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 12 {
				msgs := []Message{{"system", "s"}, {"user", fmt.Sprintf("question %d of %d", i, g)}}
				if g%4 == 3 && i%4 == 0 {
					if _, err := bad.Render(context.Background(), []Message{{"user", "recurse"}}, true); !errors.Is(err, errRecursion) {
						errs <- fmt.Errorf("goroutine %d: hostile render: %v", g, err)
					}
					continue
				}
				got, err := good.Render(context.Background(), msgs, true)
				if want := inProcess(t, llama3, msgs, true); err != nil || got != want {
					errs <- fmt.Errorf("goroutine %d render %d: %q, %v; want %q", g, i, got, err, want)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Bytes that are not UTF-8 pass through as they are.
func TestRenderKeepsBytes(t *testing.T) {
	tmpl, err := Compile(llama3, "<s>", "</s>")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{"user", "bad \xff\xfe bytes, a NUL \x00 and half of \xe6\xbc"}}
	got, err := tmpl.Render(context.Background(), msgs, true)
	if want := inProcess(t, llama3, msgs, true); err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
}

// A worker killed from outside while idle is replaced, unnoticed, whether
// it is gone when the next request comes (exited) or goes as it comes (the
// retry); stopAll leaves no process behind.
func TestWorkerKilledWhileIdle(t *testing.T) {
	idlePids := func() []int {
		workers.mu.Lock()
		defer workers.mu.Unlock()
		var pids []int
		for _, w := range workers.idle {
			pids = append(pids, w.cmd.Process.Pid)
		}
		return pids
	}
	for _, wait := range []bool{true, false} {
		assertRendersChatML(t)
		pids := idlePids()
		if len(pids) == 0 {
			t.Fatal("no idle worker after a render")
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		for _, p := range pids {
			for deadline := time.Now().Add(10 * time.Second); wait && testenv.Alive(p); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("worker %d still alive 10 s after SIGKILL", p)
				}
			}
		}
		assertRendersChatML(t)
	}
	if kids := testenv.Children(os.Getpid(), "ovrun-template-worker"); len(kids) == 0 {
		t.Error("no worker process runs after a render")
	}
	workers.stopAll()
	if kids := testenv.Children(os.Getpid(), "ovrun-template-worker"); len(kids) != 0 {
		t.Errorf("workers left after stopAll: %v", kids)
	}
}

// Each worker keeps at most maxKnown templates, then a fresh one starts.
func TestWorkersRetireAfterManyTemplates(t *testing.T) {
	for i := range maxKnown + 4 {
		tmpl, err := Compile(fmt.Sprintf("{{ messages[0]['content'] }} %d", i), "", "")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tmpl.Render(context.Background(), []Message{{"user", "n"}}, false); err != nil || got != fmt.Sprintf("n %d", i) {
			t.Fatalf("template %d: %q, %v", i, got, err)
		}
	}
	workers.mu.Lock()
	defer workers.mu.Unlock()
	for _, w := range workers.idle {
		if len(w.known) > maxKnown {
			t.Errorf("an idle worker holds %d templates", len(w.known))
		}
	}
}

func FuzzRender(f *testing.F) {
	for _, s := range []string{ChatML, llama3, bomb, "{{ messages }}", "{% for m in messages %}{{ m.content|upper }}{% endfor %}",
		"{{ range(10**9)|length }}", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{{ 'a' * 1000000000 }}", "{{ ((((1)))) }}"} {
		f.Add(s, "Hello!")
	}
	f.Fuzz(func(t *testing.T, src, content string) {
		check := func(err error) {
			var le *LimitError
			msg := err.Error()
			if !strings.HasPrefix(msg, "chat template") || strings.Contains(msg, "\n") || len(msg) > maxErrorBytes+200 {
				t.Errorf("error %q: want one short line naming the template", msg)
			}
			if strings.Contains(msg, "template worker") && !errors.As(err, &le) {
				t.Errorf("the worker crashed outside the limits: %v", err)
			}
		}
		tmpl, err := Compile(src, "<s>", "</s>")
		if err != nil {
			check(err)
			return
		}
		out, err := tmpl.Render(context.Background(), []Message{{"user", content}}, true)
		if err != nil {
			check(err)
		} else if len(out) > MaxOutputBytes {
			t.Errorf("output of %d bytes", len(out))
		}
	})
}
