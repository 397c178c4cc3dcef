package cliutil

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/urfave/cli/v2"
)

// Status draws one progress line, redrawn in place, on a terminal. A nil
// *Status draws nothing; NewStatus returns nil when the output is not a
// terminal or the user asked for quiet. It is safe for concurrent use.
type Status struct {
	w     io.Writer
	mu    sync.Mutex
	drawn bool
}

// NewStatus is a Status on f, or nil when quiet or f is not a terminal.
func NewStatus(f *os.File, quiet bool) *Status {
	if quiet || !IsTerminal(f) {
		return nil
	}
	return StatusTo(f)
}

// StatusTo is a Status that draws on w whatever w is (for tests).
func StatusTo(w io.Writer) *Status { return &Status{w: w} }

// IsTerminal reports whether f is a character device (a terminal).
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Show replaces the line with the formatted text.
func (s *Status) Show(format string, args ...any) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, "\r\033[K"+format, args...)
	s.drawn = true
}

// Clear erases the line, if one was drawn.
func (s *Status) Clear() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drawn {
		fmt.Fprint(s.w, "\r\033[K")
		s.drawn = false
	}
}

// Flags that both binaries declare the same way; each call makes a new flag
// for one binary's package variable.

// ModelFlag is --model, the model file or folder.
func ModelFlag(required bool) *cli.StringFlag {
	return &cli.StringFlag{Name: "model", Usage: "a `.gguf` file (llama.cpp/ollama; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K) or a checkpoint DIR in Hugging Face layout (config.json, *.safetensors)",
		Required: required, EnvVars: []string{"OVRUN_MODEL"}}
}

// DeviceFlag is --device, the OpenVINO device.
func DeviceFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "device", Value: "CPU", Usage: "OpenVINO `DEVICE`: CPU, GPU or NPU", EnvVars: []string{"OVRUN_DEVICE"}}
}

// PrecisionFlag is --precision, the inference precision hint.
func PrecisionFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "precision", Usage: "inference precision hint `f32|bf16|f16` (default: the device's; bf16 on CPUs with AMX, so correctness checks ask for f32)",
		Action: func(_ *cli.Context, v string) error { _, err := ParsePrecision(v); return err }}
}

// PropFlag is --prop, extra compile properties.
func PropFlag() *cli.StringSliceFlag {
	return &cli.StringSliceFlag{Name: "prop", Usage: "extra compile property `KEY=VALUE` (repeatable)"}
}

// QuietFlag is --quiet (-q), no progress line.
func QuietFlag() *cli.BoolFlag {
	return &cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress output"}
}
