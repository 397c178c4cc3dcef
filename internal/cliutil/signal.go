package cliutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

// ExitInterrupted is the exit status after Ctrl-C or SIGTERM.
const ExitInterrupted = 130

// SignalContext returns a context that the first SIGINT or SIGTERM
// cancels, so that the work stops and writes what exists. A second signal
// does not wait for that: it removes the temporary files of unfinished
// outputs, says so on stderr and exits at once with status 130, whatever
// the process is blocked in (a compile, a flush, a read). stop releases
// the signals.
func SignalContext(parent context.Context, prog string, stderr io.Writer) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			cancel()
		case <-done:
			return
		}
		select {
		case <-ch:
			safefile.RemoveTemps()
			fmt.Fprintf(stderr, "%s: interrupted again; exiting now\n", prog)
			os.Exit(ExitInterrupted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}

// InterruptedError is a Ctrl-C (it matches context.Canceled) that says
// where what was done so far was written, if anywhere.
type InterruptedError struct {
	Saved string // a path, "" when nothing was written
}

func (e *InterruptedError) Error() string {
	if e.Saved == "" {
		return "interrupted"
	}
	return "interrupted; what was done so far is in " + e.Saved
}

func (e *InterruptedError) Unwrap() error { return context.Canceled }

// Interrupted turns err into an *InterruptedError naming saved when it is a
// cancellation, and returns it unchanged otherwise.
func Interrupted(err error, saved string) error {
	if !errors.Is(err, context.Canceled) {
		return err
	}
	return &InterruptedError{Saved: saved}
}

// InterruptMessage is the line to print for an error that matches
// context.Canceled: "interrupted", with where the partial result went.
func InterruptMessage(err error) string {
	var ie *InterruptedError
	if errors.As(err, &ie) {
		return ie.Error()
	}
	return "interrupted"
}
