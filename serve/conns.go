package serve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound what one client can cost the server.
type Limits struct {
	MaxBody      int64         // bytes of a request body; more is a 413
	ReadTimeout  time.Duration // for a client to send its request, headers and body
	WriteTimeout time.Duration // for a client to take each piece of the answer
	IdleTimeout  time.Duration // a keep-alive connection with no request is closed after it
	MaxConns     int           // open connections (see connLimit)
}

// DefaultLimits are the limits of a server whose Config names none.
var DefaultLimits = Limits{MaxBody: 1 << 20, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
	IdleTimeout: 60 * time.Second, MaxConns: 512}

func (l *Limits) fill() {
	d := DefaultLimits
	if l.MaxBody <= 0 {
		l.MaxBody = d.MaxBody
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = d.ReadTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = d.WriteTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
	}
}

// connLimit caps the open connections of a listener, so that clients that
// open many and send slowly cannot exhaust the file descriptors. At the cap
// a new connection closes the oldest one that is not serving a request (one
// still sending its request, most likely a slow client; else an idle
// keep-alive one); when every connection is serving, the newcomer gets a 503
// and is closed.
type connLimit struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connEntry
}

type connEntry struct {
	since   time.Time
	serving int // requests in a handler now
	idle    bool
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	return &connLimit{Listener: ln, max: max, conns: map[net.Conn]*connEntry{}}
}

// busyResponse is written to a connection refused at the cap.
var busyResponse = func() []byte {
	body := `{"error":{"message":"too many open connections","type":"service_unavailable","param":null,"code":null}}`
	return []byte(fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
}()

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if len(l.conns) >= l.max && !l.evictLocked() {
			l.mu.Unlock()
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Write(busyResponse)
			c.Close()
			continue
		}
		l.conns[c] = &connEntry{since: time.Now()}
		l.mu.Unlock()
		return c, nil
	}
}

// evictLocked closes the oldest connection serving no request, preferring
// one that has not finished sending a request over an idle one.
func (l *connLimit) evictLocked() bool {
	var victim net.Conn
	var best *connEntry
	for c, e := range l.conns {
		if e.serving > 0 {
			continue
		}
		if best == nil || (best.idle && !e.idle) || (best.idle == e.idle && e.since.Before(best.since)) {
			victim, best = c, e
		}
	}
	if victim == nil {
		return false
	}
	delete(l.conns, victim)
	victim.Close()
	return true
}

// state is the http.Server's ConnState hook.
func (l *connLimit) state(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.conns[c]
	if e == nil {
		return
	}
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	case http.StateIdle:
		e.idle, e.since = true, time.Now()
	case http.StateActive:
		e.idle = false
	}
}

// serving marks a connection's request as being in a handler (+1) or done (-1).
func (l *connLimit) serving(c net.Conn, d int) {
	l.mu.Lock()
	if e := l.conns[c]; e != nil {
		e.serving += d
	}
	l.mu.Unlock()
}

// open is the number of connections held.
func (l *connLimit) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

type connKey struct{}

// inflight counts the requests in handlers; wait returns once none is.
type inflight struct {
	mu   sync.Mutex
	n    int
	zero chan struct{}
}

func (f *inflight) add() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

func (f *inflight) done() {
	f.mu.Lock()
	f.n--
	if f.n == 0 && f.zero != nil {
		close(f.zero)
		f.zero = nil
	}
	f.mu.Unlock()
}

func (f *inflight) wait(ctx context.Context) error {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return nil
	}
	if f.zero == nil {
		f.zero = make(chan struct{})
	}
	z := f.zero
	f.mu.Unlock()
	select {
	case <-z:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Serve answers connections on ln, with the server's limits, until
// Shutdown; it returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	cl := newConnLimit(ln, s.cfg.Limits.MaxConns)
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, _ := r.Context().Value(connKey{}).(net.Conn)
			cl.serving(c, 1)
			defer cl.serving(c, -1)
			s.handler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: s.cfg.Limits.ReadTimeout,
		IdleTimeout:       s.cfg.Limits.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnState:         cl.state,
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
	}
	s.mu.Lock()
	s.hs, s.conns = hs, cl
	s.mu.Unlock()
	if err := hs.Serve(cl); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

// shuttingDown reports whether Shutdown has begun.
func (s *Server) shuttingDown() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// OpenConns is the number of connections the server holds (0 before Serve).
func (s *Server) OpenConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		return 0
	}
	return s.conns.open()
}

// Shutdown stops the server: it accepts no more connections, answers
// requests still waiting for a sequence 503, lets the sequences decoding
// finish until ctx ends, then cancels them, and returns once no handler
// runs, so the engine may be closed after it. It returns how many
// sequences it had to cancel.
func (s *Server) Shutdown(ctx context.Context) (cancelled int) {
	s.stopOnce.Do(func() { close(s.stopping) })
	s.mu.Lock()
	hs := s.hs
	s.mu.Unlock()
	if hs != nil {
		hs.SetKeepAlivesEnabled(false)
		go hs.Shutdown(context.WithoutCancel(ctx)) // stops accepting; closes idle connections
	}
	if s.inflight.wait(ctx) != nil {
		cancelled = len(s.slots) // the sequences holding a slot
		s.cancel()
		_ = s.inflight.wait(context.Background()) // each sequence ends after its step in progress
	}
	s.cancel()
	if hs != nil {
		hs.Close()
	}
	return cancelled
}
