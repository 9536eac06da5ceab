package store

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestProbeEtcdSaysWhy: an etcd endpoint where nothing listens is an
// error naming the endpoint and the refused connection once the timeout
// is over, not a client retrying for ever. (TLS refusals:
// scheduler/daemon's TestEtcdTLS.)
func TestProbeEtcdSaysWhy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := l.Addr().String()
	l.Close() // nothing listens there now
	cli, err := DialEtcd([]string{ep}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	err = ProbeEtcd(context.Background(), cli, []string{ep}, nil, time.Second)
	if err == nil {
		t.Fatal("probe of an endpoint where nothing listens succeeded")
	}
	if !strings.Contains(err.Error(), ep) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("error %q; want the endpoint and the refused connection", err)
	}
}
