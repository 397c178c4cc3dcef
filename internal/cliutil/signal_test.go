package cliutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestSignalContextCancelsOnFirstSignal(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, stop := SignalContext(context.Background(), "test", io.Discard)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first SIGTERM did not cancel the context")
	}
	stop() // releases the signals and the goroutine waiting for a second one
}

func TestInterruptMessages(t *testing.T) {
	if got := InterruptMessage(Interrupted(fmt.Errorf("run: %w", context.Canceled), "run.json")); got != "interrupted; what was done so far is in run.json" {
		t.Errorf("with a summary: %q", got)
	}
	if got := InterruptMessage(Interrupted(context.Canceled, "")); got != "interrupted" {
		t.Errorf("without: %q", got)
	}
	if err := Interrupted(errors.New("boom"), "x"); err.Error() != "boom" {
		t.Errorf("a failure became %q", err)
	}
	if !errors.Is(Interrupted(context.Canceled, "x"), context.Canceled) {
		t.Error("InterruptedError does not match context.Canceled")
	}
	if err := CheckFloat("rate", 1.0/zero(), 0, 1); err == nil {
		t.Error("CheckFloat accepted +Inf")
	}
}

func zero() float64 { return 0 }
