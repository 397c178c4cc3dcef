package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ovtoolkit/ovrun/compilecost"
	"github.com/ovtoolkit/ovrun/internal/testenv"
)

// TestServeRungIdle: with --rung-idle, a rung (or, batching static
// graphs, a rung's variant) no request has used for that long is freed
// (ovrun_rungs falls, ovrun_rung_releases_total rises), the first rung is
// kept, and the next request that grows into the freed rung gets it
// compiled again, by deadline under --compile-cost, and the same answer.
func TestServeRungIdle(t *testing.T) {
	g := testenv.SmolLM2(t)
	cost := saveStaticProfile(t, filepath.Join(t.TempDir(), "cost.json"),
		compilecost.Rung{Capacity: 64, CompileS: []float64{2}}, compilecost.Rung{Capacity: 128, CompileS: []float64{2}})
	for _, mode := range []struct{ name, kind string }{{"off", "decode"}, {"on", "batch"}} {
		t.Run("batching "+mode.name, func(t *testing.T) {
			serveRungIdle(t, mode.kind, "--model", g, "--precision", "f32", "--attention", "static", "--batching", mode.name,
				"--max-seqs", "1", "--ladder", "64,128", "--rung-idle", "1s", "--compile-cost", cost)
		})
	}
}

func serveRungIdle(t *testing.T, kind string, args ...string) {
	cmd, base, _ := startServe(t, nil, args...)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	complete := func() string {
		body := `{"prompt":"Once upon a time","max_tokens":90,"temperature":0}`
		resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct{ Choices []struct{ Text string } }
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 || len(r.Choices) != 1 {
			t.Fatalf("completion: %d %v", resp.StatusCode, err)
		}
		return r.Choices[0].Text
	}
	metric := func(name string) string {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("/metrics has no %s", name)
		}
		return string(m[1])
	}
	first := complete()
	if n := metric("ovrun_rungs"); n != "2" {
		t.Fatalf("ovrun_rungs %s after a request into rung 128, want 2", n)
	}
	deadline := time.Now().Add(20 * time.Second)
	for metric("ovrun_rungs") != "1" {
		if time.Now().After(deadline) {
			t.Fatal("rung 128 was not freed 20 s after its last use with --rung-idle 1s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := metric("ovrun_rung_releases_total"); n != "1" {
		t.Fatalf("ovrun_rung_releases_total %s, want 1", n)
	}
	if again := complete(); again != first {
		t.Fatalf("after rung 128 was compiled again: %q, before %q", again, first)
	}
	if n := metric(`ovrun_compiles_total{capacity="128",kind="` + kind + `",outcome="ok"}`); n != "2" {
		t.Fatalf("rung 128 compiled %s times, want 2", n)
	}
	if n := metric(`ovrun_compile_launches_total{reason="deadline"}`); n != "2" {
		t.Fatalf("ovrun_compile_launches_total{reason=\"deadline\"} %s, want rung 128 twice", n)
	}
}
