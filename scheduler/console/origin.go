package console

import (
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// A browser page on another origin than the scheduler's own host may open
// the console only when --allow-origin names it (Options.OriginPatterns).
// The WebSocket library refuses such a handshake with a 403 a browser never
// shows its page: the page sees close code 1006 and no reason. So a
// refused origin is answered with a WebSocket that closes at once with
// 1008 (policy violation) and a reason saying what to do, before any
// frame is read or sent; a client that is not a browser making an upgrade
// gets the 403 with the same words. Each refused origin is logged, at most
// once a minute.

// originLogEvery is how often one refused origin is logged.
const originLogEvery = time.Minute

// originLogMax bounds the origins remembered for rate-limiting the log,
// and the refusals logged in one originLogEvery over all origins: a
// stranger rotating made-up origins gets no more lines than that.
const originLogMax = 16

// originRefused says whether r comes from a browser origin the console
// does not allow: not the request's own host and matching none of the
// patterns (the rules of websocket.AcceptOptions.OriginPatterns).
func originRefused(r *http.Request, patterns []string) (origin string, refused bool) {
	origin = r.Header.Get("Origin")
	if origin == "" {
		return "", false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return origin, true
	}
	if strings.EqualFold(r.Host, u.Host) {
		return origin, false
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, err := path.Match(strings.ToLower(p), strings.ToLower(target)); err == nil && ok {
			return origin, false
		}
	}
	return origin, true
}

// originReason is what a refused page is told (a close reason holds at
// most 123 bytes).
func originReason(origin string) string {
	origin = Clean(origin, MaxNameBytes)
	r := "kelpie: origin " + origin + " not allowed: start the scheduler with --allow-origin " + origin
	if len(r) > 123 {
		r = "kelpie: origin not allowed: start the scheduler with --allow-origin ORIGIN (docs/console-api.md)"
	}
	return r
}

// originLog rate-limits the scheduler's log lines about refused origins.
type originLog struct {
	mu     sync.Mutex
	last   map[string]time.Time
	window time.Time // when the current originLogEvery began
	lines  int       // lines logged in it
}

// due says whether origin's refusal should be logged at now.
func (l *originLog) due(origin string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil || now.Sub(l.window) >= originLogEvery {
		l.last, l.window, l.lines = map[string]time.Time{}, now, 0
	}
	if _, ok := l.last[origin]; ok || l.lines >= originLogMax {
		return false
	}
	l.last[origin] = now
	l.lines++
	return true
}

// refuseOrigin answers a console request from a refused origin: a
// WebSocket closed with 1008 and the reason, or a 403 with it.
func (s *Server) refuseOrigin(w http.ResponseWriter, r *http.Request, origin string) {
	reason := originReason(origin)
	if s.origins.due(origin, s.opts.Now()) {
		s.opts.Logf("console: refused a WebSocket from %s (browser origin %q): not the scheduler's host and no --allow-origin pattern matches it", r.RemoteAddr, Clean(origin, MaxNameBytes))
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "console: "+reason, http.StatusForbidden)
		return
	}
	// The origin is checked here; the library must not answer 403 itself.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	_ = ws.Close(websocket.StatusPolicyViolation, reason)
}
