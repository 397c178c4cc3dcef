package testenv

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// SlowClients opens n connections to addr, each sending the start of a
// request one byte every gap, as slowloris does, until stop is closed or
// the server drops it. It returns how many connected and a wait for all of
// them to end.
func SlowClients(addr string, n int, gap time.Duration, stop <-chan struct{}) (opened *atomic.Int64, wait func()) {
	opened = new(atomic.Int64)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			opened.Add(1)
			defer c.Close()
			for _, b := range []byte("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n") {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(gap):
				}
			}
		}()
	}
	return opened, wg.Wait
}
