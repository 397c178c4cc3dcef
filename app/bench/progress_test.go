package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	tests := []struct {
		name    string
		ev      Event
		elapsed time.Duration
		want    string
	}{
		{"first run, no estimate", Event{Slot: Slot{Arm: "grow-eager", Warmup: true, Position: 1}, Index: 1, Total: 14, Pairs: 6}, 0,
			"warm-up  arm grow-eager  run 1/14  ETA --:--"},
		{"counts down in a run", Event{Slot: Slot{Pair: 2, Arm: "grow-one-ahead"}, Index: 6, Total: 14, Pairs: 6, ETA: 90 * time.Second, MeanRun: 10 * time.Second}, 4 * time.Second,
			"pair 2/6  arm grow-one-ahead  run 6/14  ETA 01:26"},
		{"a run past the mean", Event{Slot: Slot{Pair: 6, Arm: "grow-eager"}, Index: 14, Total: 14, Pairs: 6, ETA: 10 * time.Second, MeanRun: 10 * time.Second}, time.Minute,
			"pair 6/6  arm grow-eager  run 14/14  ETA 00:00"},
		{"hours", Event{Slot: Slot{Pair: 1, Arm: "direct"}, Index: 3, Total: 40, Pairs: 12, ETA: 2*time.Hour + 5*time.Second, MeanRun: time.Minute}, 0,
			"pair 1/12  arm direct  run 3/40  ETA 2:00:05"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := progressLine(tc.ev, tc.elapsed); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestTerminalDrawsAndClears(t *testing.T) {
	var b bytes.Buffer
	term := newTerminal(&b)
	term.Update(Event{Slot: Slot{Pair: 1, Arm: "lazy"}, Index: 3, Total: 4, Pairs: 1})
	term.Close()
	out := b.String()
	if !strings.Contains(out, "pair 1/1  arm lazy  run 3/4") || !strings.HasSuffix(out, "\r\033[K") {
		t.Errorf("output %q", out)
	}
	var nilTerm *Terminal
	nilTerm.Update(Event{})
	nilTerm.Close()
}
