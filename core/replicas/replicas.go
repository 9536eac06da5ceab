// Package replicas lets the scheduler's clients (agents, roles) take the
// addresses of several scheduler replicas, comma-separated where one
// address was taken before, and follow the one that leads. Only the
// leading replica listens (a standby serves nothing until it leads: see
// docs/ha.md), so the client channel tries the addresses in turn
// (gRPC's pick_first over all of them) and stays with the one that
// accepts; when that connection breaks it tries them again. A leader that
// is paused rather than dead keeps its connections open without answering:
// keepalive pings notice it (after KeepaliveTime and KeepaliveTimeout).
package replicas

import (
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Keepalive of a channel to several replicas: a ping after KeepaliveTime
// without traffic (not below the scheduler's enforced minimum, 20 s by
// default), the connection dropped when its answer takes longer than
// KeepaliveTimeout.
const (
	KeepaliveTime    = 20 * time.Second
	KeepaliveTimeout = 5 * time.Second
)

// Split is the addresses in addrs (comma-separated, blanks ignored).
func Split(addrs string) []string {
	var out []string
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Target is what to pass grpc.NewClient for addrs, with the options that
// go with it: one address as it is (no option), several through a
// resolver that offers them all to pick_first, with keepalive.
func Target(addrs string) (string, []grpc.DialOption) {
	list := Split(addrs)
	if len(list) <= 1 {
		return strings.TrimSpace(addrs), nil
	}
	eps := make([]resolver.Endpoint, len(list))
	for i, a := range list {
		eps[i] = resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}}
	}
	r := manual.NewBuilderWithScheme("kelpie-replicas")
	r.InitialState(resolver.State{Endpoints: eps})
	return r.Scheme() + ":///scheduler", []grpc.DialOption{grpc.WithResolvers(r),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true})}
}
