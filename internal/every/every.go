// Package every calls a function at a steady interval in the background
// until it is stopped: the pages of weights dropped while a graph compiles
// (runtime/ovexec), a queued block's heartbeat (app/campaignq).
package every

import (
	"sync"
	"time"
)

// Start calls f every d from one goroutine until the returned stop is
// called; stop waits for a call in progress and may be called more than
// once.
func Start(d time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
