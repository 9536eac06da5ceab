package console

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// throttle keeps a flood of bad logins from costing more than a trickle:
// each remote address that fails to authenticate waits out a back-off that
// doubles with every failure before its next attempt is even read (HTTP
// 429, before the WebSocket upgrade), streams that have not authenticated
// yet are capped, and refusals are audited at most once per address per
// AuditEvery with a count of the rest, so that a flood cannot push real
// events out of the viewers' event list.
type throttle struct {
	free       int           // failures allowed before the back-off starts
	base, max  time.Duration // the back-off after free+1 failures, doubling up to max
	auditEvery time.Duration
	maxUnauth  int
	maxAddrs   int

	mu     sync.Mutex
	addrs  map[string]*addrState
	unauth int
}

type addrState struct {
	fails      int
	until      time.Time // no attempt is read before this
	lastAudit  time.Time // the last refusal audited for this address
	suppressed int       // refusals since lastAudit not audited
	pending    int       // its streams not yet authenticated
	seen       time.Time
}

// maxPendingPerAddr caps one address's unauthenticated streams; after a
// failed login it may have only one at a time, so that parallel guesses
// cannot slip past the back-off.
const maxPendingPerAddr = 8

func newThrottle(o Options) *throttle {
	return &throttle{free: 3, base: o.AuthBackoff, max: o.MaxAuthBackoff, auditEvery: time.Minute,
		maxUnauth: o.MaxUnauthenticated, maxAddrs: 1 << 16, addrs: map[string]*addrState{}}
}

// host is the address part of a remote address, without the port: every
// connection from one machine shares its back-off.
func host(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// state returns ip's entry, making room when the table is full by dropping
// entries that have nothing left to enforce.
func (t *throttle) state(ip string, now time.Time) *addrState {
	st, ok := t.addrs[ip]
	if ok {
		st.seen = now
		return st
	}
	if len(t.addrs) >= t.maxAddrs {
		for k, v := range t.addrs {
			if now.After(v.until) && now.Sub(v.lastAudit) > t.auditEvery {
				delete(t.addrs, k)
			}
		}
	}
	st = &addrState{seen: now}
	if len(t.addrs) < t.maxAddrs {
		t.addrs[ip] = st
	}
	return st
}

// admit decides whether a new connection from ip is read at all. It
// returns the wait left when ip is backing off, and counts the connection
// among the unauthenticated ones when it is admitted.
func (t *throttle) admit(ip string, now time.Time) (wait time.Duration, full bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, ok := t.addrs[ip]
	if ok && now.Before(st.until) {
		return st.until.Sub(now), false
	}
	if ok && (st.pending >= maxPendingPerAddr || (st.fails > t.free && st.pending >= 1)) {
		return t.base, false
	}
	if t.unauth >= t.maxUnauth {
		return 0, true
	}
	t.unauth++
	t.state(ip, now).pending++
	return 0, false
}

// authenticated ends ip's unauthenticated phase: a success clears its
// back-off, a failure lengthens it.
func (t *throttle) authenticated(ip string, ok bool, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unauth--
	if st, found := t.addrs[ip]; found {
		st.pending--
	}
	if ok {
		if st, found := t.addrs[ip]; found && st.suppressed == 0 && st.pending == 0 {
			delete(t.addrs, ip)
		} else if found {
			st.fails, st.until = 0, time.Time{}
		}
		return
	}
	st := t.state(ip, now)
	st.fails++
	if n := st.fails - t.free; n > 0 {
		d := t.base
		for i := 1; i < n && d < t.max; i++ {
			d *= 2
		}
		st.until = now.Add(min(d, t.max))
	}
}

// auditDue says whether a refusal from ip is audited now and how many
// earlier ones were not; the others are only counted.
func (t *throttle) auditDue(ip string, now time.Time) (due bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.state(ip, now)
	if !st.lastAudit.IsZero() && now.Sub(st.lastAudit) < t.auditEvery {
		st.suppressed++
		return false, 0
	}
	suppressed, st.suppressed, st.lastAudit = st.suppressed, 0, now
	return true, suppressed
}

// release ends an unauthenticated phase that never reached a login (the
// upgrade failed).
func (t *throttle) release(ip string) {
	t.mu.Lock()
	t.unauth--
	if st, found := t.addrs[ip]; found {
		st.pending--
	}
	t.mu.Unlock()
}

// unauthenticated is the number of streams not yet authenticated.
func (t *throttle) unauthenticated() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unauth
}

// refuseEarly answers a connection the throttle does not admit, without
// reading or upgrading it, and audits it in aggregate.
func (s *Server) refuseEarly(w http.ResponseWriter, r *http.Request, wait time.Duration, full bool) {
	s.refused.Add(1)
	s.throttled.Add(1)
	ip := host(r.RemoteAddr)
	why := "too many unauthenticated streams"
	if full {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "console: "+why, http.StatusServiceUnavailable)
	} else {
		why = fmt.Sprintf("backing off after failed logins (%s left)", wait.Round(time.Millisecond))
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		http.Error(w, "console: "+why, http.StatusTooManyRequests)
	}
	s.auditRefusal(ip, "", "from "+r.RemoteAddr, why)
}

// auditRefusal writes a refused connection to the audit log, at most once
// per address per minute (with how many were not written since).
func (s *Server) auditRefusal(ip, who, detail, why string) {
	due, suppressed := s.throttle.auditDue(ip, s.opts.Now())
	if !due {
		return
	}
	if suppressed > 0 {
		detail += fmt.Sprintf(" (and %d more refused connections from %s not recorded in the last minute)", suppressed, ip)
	}
	if who == "" {
		who = "token " + fingerprint("")
	}
	s.audit(AuditEntry{Time: s.opts.Now(), Who: who, Command: "connect", Detail: detail, Allowed: false, Reason: why})
}
