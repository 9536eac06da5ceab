package console

import (
	"container/list"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// throttle keeps a flood of bad logins from costing more than a trickle.
//
// Failures are counted per network prefix (an IPv4 /24, an IPv6 /64, and
// all of loopback as one), since an attacker rotates source addresses far
// more easily than networks: after a few free failures the prefix backs off
// (its next attempts are answered 429 before being read, the wait doubling
// per failure), and a global failure budget caps guesses from every prefix
// together. An address that logged in successfully in the last hour and has
// not failed since is let through both (a token is still checked), so an
// operator is not locked out by a stranger guessing from the same network;
// a stranger using the operator's very address loses it that exemption
// with its first failure.
//
// Streams that have not authenticated yet (waiting for their hello) are
// capped globally and per prefix; a new one beyond either cap closes the
// oldest waiting one rather than being refused, so strangers holding slots
// open cannot keep anyone else out. A client that sends its token in the
// Authorization header never takes a slot: it is checked at once.
//
// Refusals are audited at most once per prefix per AuditEvery, and at most
// auditBurst times a minute overall, with a count of the rest, so that a
// flood cannot push real events out of the viewers' event list.
type throttle struct {
	free        int           // failures a prefix may make before it backs off
	base, max   time.Duration // the back-off after free+1 failures, doubling up to max
	forget      time.Duration // a prefix's failures are forgotten after this long without one
	auditEvery  time.Duration
	maxUnauth   int
	maxPrefixes int
	goodFor     time.Duration
	maxGood     int

	mu       sync.Mutex
	prefixes map[string]*prefixState
	good     map[netip.Addr]time.Time // addresses with a recent success and no failure since
	waiting  *list.List               // *pendingSlot, oldest first
	budget   bucket                   // the global failure budget
	audits   bucket                   // the global budget of refusal records
	// auditSuppressed counts refusals not audited for want of the global
	// budget, reported with the next record.
	auditSuppressed int
}

type prefixState struct {
	fails      int
	lastFail   time.Time
	until      time.Time // no attempt is read before this
	lastAudit  time.Time // the last refusal audited for this prefix
	suppressed int       // refusals since lastAudit not audited
	pending    int       // its streams not yet authenticated
}

// pendingSlot is one stream waiting for its hello. evicted is closed when a
// newer stream takes its place.
type pendingSlot struct {
	prefix  string
	elem    *list.Element
	evicted chan struct{}
}

// bucket is a token bucket: burst tokens, one more every every.
type bucket struct {
	burst  float64
	every  time.Duration
	tokens float64
	at     time.Time
}

func (b *bucket) take(now time.Time) bool {
	if b.at.IsZero() {
		b.tokens, b.at = b.burst, now
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(b.burst, b.tokens+float64(d)/float64(b.every))
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// has says whether a token is left, without taking it.
func (b *bucket) has(now time.Time) bool {
	if b.at.IsZero() {
		return b.burst >= 1
	}
	return b.tokens+float64(now.Sub(b.at))/float64(b.every) >= 1
}

// wait is how long until a token is left.
func (b *bucket) wait(now time.Time) time.Duration {
	t := b.tokens + float64(now.Sub(b.at))/float64(b.every)
	if t >= 1 {
		return 0
	}
	return time.Duration((1 - t) * float64(b.every))
}

// maxPendingPerPrefix caps one prefix's unauthenticated streams; after its
// failures back it off, it may have only one at a time, so that parallel
// guesses cannot slip past the back-off.
const maxPendingPerPrefix = 8

// auditBurst is how many refusal records the throttle writes a minute at
// most, over all prefixes.
const auditBurst = 10

func newThrottle(o Options) *throttle {
	return &throttle{free: 3, base: o.AuthBackoff, max: o.MaxAuthBackoff, forget: 10 * time.Minute,
		auditEvery: time.Minute, maxUnauth: o.MaxUnauthenticated, maxPrefixes: 1 << 16,
		goodFor: time.Hour, maxGood: 4096,
		prefixes: map[string]*prefixState{}, good: map[netip.Addr]time.Time{}, waiting: list.New(),
		budget: bucket{burst: float64(o.FailureBudget), every: o.FailureBudgetEvery},
		audits: bucket{burst: auditBurst, every: time.Minute / auditBurst}}
}

// host is the address part of a remote address, without the port.
func host(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}

// Prefix is the network a remote address (host or host:port) is counted
// in: its IPv4 /24, its IPv6 /64, "loopback" for every loopback address;
// anything else that is not an address, as it is.
func Prefix(remote string) string {
	a, err := netip.ParseAddr(host(remote))
	if err != nil {
		return host(remote)
	}
	a = a.Unmap().WithZone("")
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.Is4():
		p, _ := a.Prefix(24)
		return p.String()
	default:
		p, _ := a.Prefix(64)
		return p.String()
	}
}

func addrOf(remote string) netip.Addr {
	a, err := netip.ParseAddr(host(remote))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

// state returns a prefix's entry, making room when the table is full by
// dropping entries that have nothing left to enforce.
func (t *throttle) state(prefix string, now time.Time) *prefixState {
	st, ok := t.prefixes[prefix]
	if ok {
		if st.fails > 0 && now.Sub(st.lastFail) > t.forget && now.After(st.until) {
			st.fails = 0
		}
		return st
	}
	if len(t.prefixes) >= t.maxPrefixes {
		for k, v := range t.prefixes {
			if now.After(v.until) && now.Sub(v.lastAudit) > t.auditEvery && v.pending == 0 {
				delete(t.prefixes, k)
			}
		}
	}
	st = &prefixState{}
	if len(t.prefixes) < t.maxPrefixes {
		t.prefixes[prefix] = st
	}
	return st
}

// isGood says whether remote logged in recently and has not failed since.
func (t *throttle) isGood(remote string, now time.Time) bool {
	at, ok := t.good[addrOf(remote)]
	return ok && now.Sub(at) < t.goodFor
}

// gate says how long remote must wait before a login of its is looked at
// (0: now) and why. The caller holds t.mu.
func (t *throttle) gate(remote string, now time.Time) (time.Duration, string) {
	if t.isGood(remote, now) {
		return 0, ""
	}
	if st, ok := t.prefixes[Prefix(remote)]; ok && now.Before(st.until) {
		return st.until.Sub(now), fmt.Sprintf("backing off after failed logins from %s", Prefix(remote))
	}
	if !t.budget.has(now) {
		return max(t.budget.wait(now), t.base), "too many failed logins on this scheduler"
	}
	return 0, ""
}

// check decides whether a login with a token in hand (the Authorization
// header) is looked at now: 0, or the wait and why not.
func (t *throttle) check(remote string, now time.Time) (time.Duration, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	wait, why := t.gate(remote, now)
	if wait == 0 && !t.isGood(remote, now) {
		// A network that has used its free failures gets one login looked
		// at a time: the others wait as if backing off until its result
		// is in, so that parallel guesses cannot slip in together when a
		// back-off ends.
		if st, ok := t.prefixes[Prefix(remote)]; ok && st.fails >= t.free {
			st.until = now.Add(t.base)
		}
	}
	return wait, why
}

// admit decides whether a stream that will send its token in a hello is
// read at all, and gives it a waiting slot. When the global or its prefix's
// cap is reached, the oldest waiting stream (of the prefix, when its cap is
// the one reached) is evicted to make room.
func (t *throttle) admit(remote string, now time.Time) (*pendingSlot, time.Duration, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wait, why := t.gate(remote, now); wait > 0 {
		return nil, wait, why
	}
	prefix := Prefix(remote)
	st := t.state(prefix, now)
	limit := maxPendingPerPrefix
	if st.fails > t.free && !t.isGood(remote, now) {
		limit = 1
	}
	if st.pending >= limit {
		t.evictOldest(prefix)
	}
	if t.waiting.Len() >= t.maxUnauth {
		t.evictOldest("")
	}
	slot := &pendingSlot{prefix: prefix, evicted: make(chan struct{})}
	slot.elem = t.waiting.PushBack(slot)
	st.pending++
	return slot, 0, ""
}

// evictOldest closes the oldest waiting stream (of prefix, or of any when
// prefix is empty) and frees its slot. The caller holds t.mu.
func (t *throttle) evictOldest(prefix string) {
	for e := t.waiting.Front(); e != nil; e = e.Next() {
		s := e.Value.(*pendingSlot)
		if prefix == "" || s.prefix == prefix {
			t.releaseLocked(s)
			close(s.evicted)
			return
		}
	}
}

func (t *throttle) releaseLocked(s *pendingSlot) {
	if s.elem == nil {
		return
	}
	t.waiting.Remove(s.elem)
	s.elem = nil
	if st, ok := t.prefixes[s.prefix]; ok {
		st.pending--
	}
}

// release frees a waiting slot (nil: none), once its stream authenticated,
// failed or went away.
func (t *throttle) release(s *pendingSlot) {
	if s == nil {
		return
	}
	t.mu.Lock()
	t.releaseLocked(s)
	t.mu.Unlock()
}

// result records a login's outcome: a success makes the address one that
// passes its prefix's back-off; a failure lengthens the prefix's back-off,
// spends the global budget and ends the address's exemption.
func (t *throttle) result(remote string, ok bool, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := addrOf(remote)
	if ok {
		if a.IsValid() {
			if _, known := t.good[a]; !known && len(t.good) >= t.maxGood {
				t.forgetGood(now)
			}
			if len(t.good) < t.maxGood {
				t.good[a] = now
			}
		}
		return
	}
	delete(t.good, a)
	t.budget.take(now)
	st := t.state(Prefix(remote), now)
	st.fails++
	st.lastFail = now
	if n := st.fails - t.free; n > 0 {
		d := t.base
		for i := 1; i < n && d < t.max; i++ {
			d *= 2
		}
		st.until = now.Add(min(d, t.max))
	}
}

// forgetGood drops expired exemptions, or the oldest one when none has
// expired. The caller holds t.mu.
func (t *throttle) forgetGood(now time.Time) {
	var oldest netip.Addr
	var oldestAt time.Time
	for a, at := range t.good {
		if now.Sub(at) >= t.goodFor {
			delete(t.good, a)
			continue
		}
		if oldestAt.IsZero() || at.Before(oldestAt) {
			oldest, oldestAt = a, at
		}
	}
	if len(t.good) >= t.maxGood {
		delete(t.good, oldest)
	}
}

// auditDue says whether a refusal from remote is audited now and how many
// earlier ones (of its prefix, and overall for want of the global budget)
// were not; the others are only counted.
func (t *throttle) auditDue(remote string, now time.Time) (due bool, suppressed, global int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.state(Prefix(remote), now)
	if !st.lastAudit.IsZero() && now.Sub(st.lastAudit) < t.auditEvery {
		st.suppressed++
		return false, 0, 0
	}
	if !t.audits.take(now) {
		t.auditSuppressed++
		return false, 0, 0
	}
	suppressed, st.suppressed, st.lastAudit = st.suppressed, 0, now
	global, t.auditSuppressed = t.auditSuppressed, 0
	return true, suppressed, global
}

// unauthenticated is the number of streams waiting for their hello.
func (t *throttle) unauthenticated() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waiting.Len()
}

// refuseEarlyAs answers a request the throttle does not let through,
// without reading or upgrading it, and audits it (as command) in aggregate.
func (s *Server) refuseEarlyAs(w http.ResponseWriter, r *http.Request, command string, wait time.Duration, why string) {
	s.refused.Add(1)
	s.throttled.Add(1)
	why = fmt.Sprintf("%s (%s left)", why, wait.Round(time.Millisecond))
	w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
	http.Error(w, "console: "+why, http.StatusTooManyRequests)
	s.auditRefusal(r.RemoteAddr, "", command, "from "+r.RemoteAddr, why)
}

// auditRefusal writes a refused login to the audit log, at most once per
// prefix a minute and auditBurst times a minute overall (with how many
// were not written since).
func (s *Server) auditRefusal(remote, who, command, detail, why string) {
	due, suppressed, global := s.throttle.auditDue(remote, s.opts.Now())
	if !due {
		return
	}
	if suppressed > 0 {
		detail += fmt.Sprintf(" (and %d more refused from %s not recorded in the last minute)", suppressed, Prefix(remote))
	}
	if global > 0 {
		detail += fmt.Sprintf(" (and %d more refused, from any network, not recorded for want of the global audit budget)", global)
	}
	if who == "" {
		who = "token " + fingerprint("")
	}
	s.audit(AuditEntry{Time: s.opts.Now(), Who: who, Command: command, Detail: detail, Allowed: false, Reason: why})
}
