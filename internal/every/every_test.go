package every

import (
	"sync/atomic"
	"testing"
	"time"
)

// Start calls f until stop, and none after stop has returned; stop may be
// called twice.
func TestStart(t *testing.T) {
	var n atomic.Int64
	stop := Start(time.Millisecond, func() { n.Add(1) })
	for deadline := time.Now().Add(10 * time.Second); n.Load() < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls in 10 s", n.Load())
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	after := n.Load()
	time.Sleep(10 * time.Millisecond)
	if got := n.Load(); got != after {
		t.Errorf("%d calls after stop returned", got-after)
	}
	stop()
}
