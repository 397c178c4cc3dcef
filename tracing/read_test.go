package tracing

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovtoolkit/ovrun/internal/safefile"
)

func TestReadTraceFileRefusesDevices(t *testing.T) {
	zero := filepath.Join(t.TempDir(), "zero")
	os.Symlink("/dev/zero", zero)
	if _, err := ReadTraceFile(zero); !errors.Is(err, safefile.ErrNotRegular) {
		t.Errorf("/dev/zero: %v", err)
	}
	if _, err := ReadTrace(safefile.LimitReader(strings.NewReader(strings.Repeat(" ", 100)), 10, "trace")); !errors.Is(err, safefile.ErrTooLarge) {
		t.Errorf("over the limit: %v", err)
	}
}

// FuzzReadTrace: any input is spans or an error, never a panic, and an
// error names the line.
func FuzzReadTrace(f *testing.F) {
	path := filepath.Join(f.TempDir(), "seed.jsonl")
	writeTrace(f, path)
	if b, err := os.ReadFile(path); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","name":"x"}]}]}]}` + "\n"))
	f.Add([]byte(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"arrayValue":{"values":[{"intValue":"1"}]}}}]}}]}`))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		spans, err := ReadTrace(strings.NewReader(string(b)))
		if err != nil {
			if !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error %q does not name the line", err)
			}
			return
		}
		for _, s := range spans {
			_ = s.Duration()
		}
	})
}
