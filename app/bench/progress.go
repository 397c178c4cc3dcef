package bench

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/ovtoolkit/ovrun/internal/cliutil"
)

// Terminal draws one progress line, `pair i/N  arm X  run k/total  ETA mm:ss`,
// redrawn every second while a run goes on. A nil *Terminal does nothing.
type Terminal struct {
	st   *cliutil.Status
	mu   sync.Mutex
	ev   Event
	at   time.Time
	stop chan struct{}
	done chan struct{}
}

// NewTerminal returns a Terminal on f, or nil when quiet or f is not a terminal.
func NewTerminal(f *os.File, quiet bool) *Terminal {
	st := cliutil.NewStatus(f, quiet)
	if st == nil {
		return nil
	}
	return &Terminal{st: st}
}

func newTerminal(w io.Writer) *Terminal {
	return &Terminal{st: cliutil.StatusTo(w)}
}

// Update shows ev; it is the Progress function of Options.
func (t *Terminal) Update(ev Event) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ev, t.at = ev, time.Now()
	t.drawLocked()
	if t.stop == nil {
		t.stop, t.done = make(chan struct{}), make(chan struct{})
		go t.tick(t.stop, t.done)
	}
}

func (t *Terminal) tick(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
			t.mu.Lock()
			t.drawLocked()
			t.mu.Unlock()
		}
	}
}

func (t *Terminal) drawLocked() {
	t.st.Show("%s", progressLine(t.ev, time.Since(t.at)))
}

// Close stops the redraws and clears the line.
func (t *Terminal) Close() {
	if t == nil {
		return
	}
	t.mu.Lock()
	stop, done := t.stop, t.done
	t.stop = nil
	t.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	t.st.Clear()
}

// progressLine renders ev after elapsed time in the current run.
func progressLine(ev Event, elapsed time.Duration) string {
	where := fmt.Sprintf("pair %d/%d", ev.Pair, ev.Pairs)
	if ev.Warmup {
		where = "warm-up"
	}
	eta := "--:--"
	if ev.MeanRun > 0 {
		left := max(ev.ETA-elapsed, ev.ETA-ev.MeanRun) // the current run may overrun the mean
		eta = clock(max(left, 0))
	}
	return fmt.Sprintf("%s  arm %s  run %d/%d  ETA %s", where, ev.Arm, ev.Index, ev.Total, eta)
}

// clock formats d as mm:ss, or h:mm:ss from an hour.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%02d:%02d", s/60, s%60)
}
