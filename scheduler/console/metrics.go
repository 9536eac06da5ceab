package console

import (
	"crypto/subtle"
	"net/http"
	"time"
)

// MetricsAuth says which bearer tokens /metrics accepts.
type MetricsAuth struct {
	// Token is the metrics token, the only one accepted unless
	// ConsoleTokens is set.
	Token string
	// ConsoleTokens accepts any console token (viewer or operator) too.
	ConsoleTokens bool
}

// Open says whether /metrics needs no token.
func (m MetricsAuth) Open() bool { return m.Token == "" && !m.ConsoleTokens }

// Metrics guards h (the /metrics handler) with m: a scrape carries
// "Authorization: Bearer T". Wrong tokens are failed logins like the
// console's: they count in the same throttle (a backing-off network's
// scrapes are answered 429 unread) and are audited the same way
// (command "metrics", aggregated).
func (s *Server) Metrics(h http.Handler, m MetricsAuth) http.Handler {
	if m.Open() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r.Header.Get("Authorization"))
		if tok == "" {
			unauthorized(w)
			return
		}
		now := s.opts.Now()
		if wait, why := s.throttle.check(r.RemoteAddr, now); wait > 0 {
			s.refuseEarlyAs(w, r, "metrics", wait, why)
			return
		}
		ok := m.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(m.Token)) == 1
		if !ok && m.ConsoleTokens {
			_, ok = s.tokens.lookup(tok)
		}
		s.throttle.result(r.RemoteAddr, ok, now)
		if !ok {
			s.refused.Add(1)
			s.auditRefusal(r.RemoteAddr, "token "+fingerprint(tok), "metrics", "from "+r.RemoteAddr, "unknown metrics token")
			unauthorized(w)
			return
		}
		defer Authenticated(r)()
		h.ServeHTTP(w, r)
	})
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="kelpie metrics"`)
	http.Error(w, "metrics: a valid bearer token is required (--metrics-token)", http.StatusUnauthorized)
}

// refuseEarly answers a console connection the throttle does not let
// through.
func (s *Server) refuseEarly(w http.ResponseWriter, r *http.Request, wait time.Duration, why string) {
	s.refuseEarlyAs(w, r, "connect", wait, why)
}
