package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// script writes an executable shell script standing in for ovrun.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ovrun")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecRunnerPassesArgsAndKeepsTheLog(t *testing.T) {
	dir := t.TempDir()
	r := &ExecRunner{Binary: script(t, `echo "$@"; echo warning >&2`)}
	spec := RunSpec{Slot: Slot{Pair: 1, Position: 1, Arm: "lazy"}, JSONPath: filepath.Join(dir, "r.json"), LogPath: filepath.Join(dir, "r.log")}
	if err := r.Run(context.Background(), testConfig(), spec); err != nil {
		t.Fatal(err)
	}
	log, _ := os.ReadFile(spec.LogPath)
	if !strings.Contains(string(log), "run --model /models/tiny --ladder 32,64,128 --policy lazy") || !strings.Contains(string(log), "warning") {
		t.Errorf("log %q", log)
	}
}

func TestExecRunnerReportsTheLastLineOfAFailure(t *testing.T) {
	r := &ExecRunner{Binary: script(t, `echo progress; echo "ovrun: model not found" >&2; exit 3`)}
	err := r.Run(context.Background(), testConfig(), RunSpec{Slot: Slot{Arm: "lazy"}, JSONPath: filepath.Join(t.TempDir(), "r.json")})
	if err == nil || !strings.Contains(err.Error(), "exit status 3: ovrun: model not found") {
		t.Errorf("error %v", err)
	}
}

func TestExecRunnerKillsTheRunOnCancel(t *testing.T) {
	r := &ExecRunner{Binary: script(t, `sleep 30`)}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err := r.Run(ctx, testConfig(), RunSpec{Slot: Slot{Arm: "lazy"}, JSONPath: filepath.Join(t.TempDir(), "r.json")})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Error("the run was not killed")
	}
}
