package serve

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// Access says who may call the server. A server on loopback is reachable
// from every web page the user opens: a page can post to it cross-site, and
// a name the attacker controls can be rebound to 127.0.0.1 (DNS rebinding).
// So every request passes three checks before a handler reads it:
//   - its Host names this machine: an IP literal, localhost (or a name
//     under .localhost), the machine's own host name, or an entry of Hosts;
//   - a browser's cross-origin request (Sec-Fetch-Site or an Origin that is
//     not the Host) is refused unless Origins names its origin;
//   - with a Key, it carries "Authorization: Bearer KEY", as OpenAI clients
//     send it (GET /healthz is exempt, for load balancers).
type Access struct {
	Hosts   []string // more host names: "name", ".suffix" (any name under it) or "*" (any Host)
	Origins []string // browser origins allowed cross-origin, e.g. "http://localhost:3000"; "*": any
	Key     string   // the API key; "": none asked for
}

// accessCheck is an Access made ready for requests.
type accessCheck struct {
	anyHost   bool
	hosts     map[string]bool
	suffixes  []string
	anyOrigin bool
	origins   map[string]bool
	cross     *http.CrossOriginProtection
	keyDigest [sha256.Size]byte
	keyWanted bool
}

func newAccessCheck(a Access) (*accessCheck, error) {
	c := &accessCheck{hosts: map[string]bool{"localhost": true}, origins: map[string]bool{},
		cross: http.NewCrossOriginProtection()}
	if h, err := os.Hostname(); err == nil && h != "" {
		c.hosts[strings.ToLower(h)] = true
	}
	for _, h := range a.Hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		switch {
		case h == "*":
			c.anyHost = true
		case h == "" || strings.ContainsAny(h, "/:@ "):
			return nil, fmt.Errorf("allowed host %q: want a host name without scheme or port, .suffix or *", h)
		case strings.HasPrefix(h, "."):
			c.suffixes = append(c.suffixes, h)
		default:
			c.hosts[h] = true
		}
	}
	for _, o := range a.Origins {
		o = strings.TrimSuffix(strings.TrimSpace(o), "/")
		if o == "*" {
			c.anyOrigin = true
			continue
		}
		if err := c.cross.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("allowed origin %q: want scheme://host[:port]: %w", o, err)
		}
		c.origins[o] = true
	}
	if a.Key != "" {
		c.keyWanted, c.keyDigest = true, sha256.Sum256([]byte(a.Key))
	}
	return c, nil
}

// hostAllowed applies the Host rule.
func (c *accessCheck) hostAllowed(hostport string) bool {
	if c.anyHost {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if net.ParseIP(host) != nil || c.hosts[host] || strings.HasSuffix(host, ".localhost") {
		return true
	}
	for _, s := range c.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// keyGiven reports whether the request carries the API key.
func (c *accessCheck) keyGiven(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(d[:], c.keyDigest[:]) == 1
}

// guard wraps next with the access checks, CORS for the allowed origins,
// the body limit, and the server's bookkeeping of requests in flight.
func (s *Server) guard(next http.Handler) http.Handler {
	c := s.access
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.add()
		defer s.inflight.done()
		if !c.hostAllowed(r.Host) {
			s.fail(w, "access", http.StatusForbidden, fmt.Sprintf("host %q is not allowed: use an address of this machine, or name it with --allowed-hosts", r.Host))
			return
		}
		origin := r.Header.Get("Origin")
		allowed := origin != "" && (c.anyOrigin || c.origins[origin])
		if allowed {
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			if !allowed {
				s.fail(w, "access", http.StatusForbidden, fmt.Sprintf("origin %q is not allowed: name it with --allow-origin", origin))
				return
			}
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
			w.Header().Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if !allowed && !c.anyOrigin {
			if err := c.cross.Check(r); err != nil {
				s.fail(w, "access", http.StatusForbidden, "cross-origin request refused: name the page's origin with --allow-origin")
				return
			}
		}
		if c.keyWanted && r.URL.Path != "/healthz" && r.URL.Path != "/health" && !c.keyGiven(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ovrun"`)
			s.failCode(w, "access", http.StatusUnauthorized, "invalid_api_key", "missing or wrong API key: send Authorization: Bearer KEY (--api-key)")
			return
		}
		if s.shuttingDown() {
			w.Header().Set("Connection", "close")
			s.fail(w, "access", http.StatusServiceUnavailable, "the server is shutting down")
			return
		}
		if r.ContentLength > s.cfg.Limits.MaxBody {
			// Read what the client sends (without keeping it, within the
			// read deadline) so that it sees the answer rather than a reset.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.Limits.ReadTimeout))
			_, _ = io.CopyN(io.Discard, r.Body, min(r.ContentLength, maxDrainBytes))
			w.Header().Set("Connection", "close")
			s.tooLarge(w, "access")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.Limits.MaxBody)
		next.ServeHTTP(w, r)
	})
}

// maxDrainBytes bounds what is read and dropped of a body announced larger
// than the limit; beyond it the connection is closed unread.
const maxDrainBytes = 64 << 20

func (s *Server) tooLarge(w http.ResponseWriter, endpoint string) {
	s.fail(w, endpoint, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than the server's limit of %d bytes (--max-body)", s.cfg.Limits.MaxBody))
}
