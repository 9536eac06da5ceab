package console

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
)

// Hosts are the names the HTTP port answers to (the Host header): a page on
// another site whose name was made to resolve to this address (DNS
// rebinding) sends its own name, and gets neither a WebSocket upgrade nor
// /metrics. The browser's Origin check cannot catch it: the page's origin
// and the Host it sends are the same name.
type Hosts map[string]bool

// NewHosts is the names of a port listening on listen: its host,
// localhost, 127.0.0.1 and ::1 — with an unspecified host (0.0.0.0, ::) the
// machine's host name and interface addresses instead of it — and extra.
func NewHosts(listen string, extra []string) Hosts {
	h := Hosts{}
	for _, n := range []string{"localhost", "127.0.0.1", "::1"} {
		h.add(n)
	}
	lh, _, err := net.SplitHostPort(listen)
	if err != nil {
		lh = listen
	}
	if ip := net.ParseIP(lh); lh == "" || (ip != nil && ip.IsUnspecified()) {
		if name, err := os.Hostname(); err == nil {
			h.add(name)
		}
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					h.add(n.IP.String())
				}
			}
		}
	} else {
		h.add(lh)
	}
	for _, n := range extra {
		h.add(n)
	}
	return h
}

func (h Hosts) add(name string) { h[normalHost(name)] = true }

// normalHost is a Host header's or a name's host, lower case, without port,
// brackets or a trailing dot.
func normalHost(s string) string {
	s = strings.TrimSpace(s)
	if hh, _, err := net.SplitHostPort(s); err == nil {
		s = hh
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	return strings.ToLower(strings.TrimSuffix(s, "."))
}

// Allows says whether a request's Host names this port. A request without
// one (HTTP/1.0) is allowed: a browser always sends it.
func (h Hosts) Allows(host string) bool { return host == "" || h[normalHost(host)] }

// Guard refuses requests for other names with 403 before next sees them.
func (h Hosts) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.Allows(r.Host) {
			http.Error(w, fmt.Sprintf("console: host %q is not a name of this scheduler (kelpie scheduler --allow-host adds one)",
				Clean(r.Host, MaxNameBytes)), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
