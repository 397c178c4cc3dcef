package tracing

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// run.otlp.jsonl is a real trace: tiny preset, grow-one-ahead over
// 128,512,1024,2048, 20 prompt + 2000 decode tokens, on a 2-core CPU.
func TestTimelineGolden(t *testing.T) {
	spans, err := ReadTraceFile(filepath.Join("testdata", "run.otlp.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := WriteTimeline(&got, spans, TimelineOptions{}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "timeline.svg")
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./tracing -run Golden -update)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("timeline differs from %s; if the change is intended, rerun with -update and look at the picture", golden)
	}
	// What a reader looks for, independent of layout details.
	svg := got.String()
	for _, s := range []string{"grow-one-ahead", "128→512", "512→1024", "1024→2048", "decode @2048", "background compile", "reserved KV", "live KV", "prefill"} {
		if !strings.Contains(svg, s) {
			t.Errorf("timeline lacks %q", s)
		}
	}
}

func TestTimelineNeedsARun(t *testing.T) {
	err := WriteTimeline(&bytes.Buffer{}, []Span{{Name: SpanDecode, TraceID: "a"}}, TimelineOptions{})
	if !errors.Is(err, ErrNoRun) {
		t.Errorf("err = %v, want ErrNoRun", err)
	}
	spans, err := ReadTraceFile(filepath.Join("testdata", "run.otlp.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteTimeline(&bytes.Buffer{}, spans, TimelineOptions{TraceID: "00"}); !errors.Is(err, ErrNoRun) {
		t.Errorf("unknown trace id: err = %v, want ErrNoRun", err)
	}
}

func TestTicks(t *testing.T) {
	tests := []struct {
		span        float64
		first, step float64
	}{
		{6.2, 0, 1}, {1.5, 0, 0.2}, {0.3, 0, 0.05}, {240, 0, 50}, {10, 0, 2},
	}
	for _, tc := range tests {
		got := ticks(tc.span)
		if len(got) < 4 || len(got) > 11 || got[0] != tc.first || got[1]-got[0] < tc.step*0.999 || got[1]-got[0] > tc.step*1.001 {
			t.Errorf("ticks(%v) = %v, want steps of %v", tc.span, got, tc.step)
		}
	}
}
