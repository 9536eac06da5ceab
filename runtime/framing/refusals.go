package framing

import (
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RefusalLog keeps the log lines of refused data-plane connections (a
// handshake without the job's secret, a bad hello) cheap and bounded, so a
// stranger that keeps connecting cannot fill a node's log: the first
// refusal from a source host in a window (Every, default a minute) is
// logged with its reason; the others from that host are counted, and once
// the window is over one line says "N refusals from HOST in the last
// minute". Over all hosts at most 5 lines a second (bursts of 20) are
// written; the next line that is says how many were left out. The zero
// value is ready; Logf nil logs nothing.
type RefusalLog struct {
	Logf  func(format string, args ...any)
	Every time.Duration    // the aggregation window (default a minute)
	Now   func() time.Time // default time.Now

	mu      sync.Mutex
	hosts   map[string]*refusalWindow
	swept   time.Time // when windows were last swept for counts to log
	limit   *rate.Limiter
	dropped uint64 // lines left out by the limit since the last one written
}

// refusalWindow is one source host's window.
type refusalWindow struct {
	start time.Time
	count uint64 // refusals since start not logged
	last  string // the last such refusal's reason
}

// maxRefusalHosts bounds the hosts remembered: a wider flood (addresses
// rotated) at worst logs some hosts' first refusal again, still under the
// overall line limit.
const maxRefusalHosts = 4096

// Refused records one refused connection from remote.
func (l *RefusalLog) Refused(remote net.Addr, err error) {
	if l == nil || l.Logf == nil {
		return
	}
	host := "unknown"
	if remote != nil {
		host = remote.String()
		if h, _, e := net.SplitHostPort(host); e == nil {
			host = h
		}
	}
	reason := "refused"
	if err != nil {
		reason = err.Error()
	}
	var lines [][]any
	l.mu.Lock()
	now, every := l.now(), l.every()
	if l.hosts == nil {
		l.hosts = map[string]*refusalWindow{}
		l.limit = rate.NewLimiter(5, 20)
	}
	if now.Sub(l.swept) >= every {
		l.swept = now
		for h, w := range l.hosts {
			if now.Sub(w.start) < every || h == host {
				continue // the current host's window is settled below
			}
			if w.count > 0 {
				lines = append(lines, summary(h, w, every))
			}
			delete(l.hosts, h)
		}
	}
	w := l.hosts[host]
	switch {
	case w == nil:
		if len(l.hosts) >= maxRefusalHosts {
			clear(l.hosts)
		}
		l.hosts[host] = &refusalWindow{start: now}
		lines = append(lines, []any{"data plane: %s: refused: %v", remote, reason})
	case now.Sub(w.start) >= every:
		if w.count > 0 {
			lines = append(lines, summary(host, w, every))
		}
		*w = refusalWindow{start: now}
		lines = append(lines, []any{"data plane: %s: refused: %v", remote, reason})
	default:
		w.count++
		w.last = reason
	}
	var out [][]any
	for _, ln := range lines {
		if !l.limit.AllowN(now, 1) {
			l.dropped++
			continue
		}
		if l.dropped > 0 {
			ln[0] = ln[0].(string) + " (and %d refusal lines left out: rate limit)"
			ln = append(ln, l.dropped)
			l.dropped = 0
		}
		out = append(out, ln)
	}
	l.mu.Unlock()
	for _, ln := range out {
		l.Logf(ln[0].(string), ln[1:]...)
	}
}

func summary(host string, w *refusalWindow, every time.Duration) []any {
	return []any{"data plane: %d refusals from %s in the last %v (the last: %s)", w.count, host, every.Round(time.Second), w.last}
}

func (l *RefusalLog) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

func (l *RefusalLog) every() time.Duration {
	if l.Every > 0 {
		return l.Every
	}
	return time.Minute
}
