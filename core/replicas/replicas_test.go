package replicas

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestSplit(t *testing.T) {
	got := Split(" a:1, ,b:2,")
	if len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" {
		t.Errorf("Split = %q", got)
	}
	if tgt, opts := Target("a:1"); tgt != "a:1" || opts != nil {
		t.Errorf("Target(one) = %q, %d options; want it as it is", tgt, len(opts))
	}
}

// serve starts a gRPC server with the health service on l.
func serve(t *testing.T, l net.Listener) *grpc.Server {
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(l)
	return s
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFollowsTheOneThatServes: of two replica addresses only one listens
// (the leader; a standby serves nothing), and calls reach it; when it goes
// and the other address starts serving, calls on the same channel reach
// that one.
func TestFollowsTheOneThatServes(t *testing.T) {
	la, lb := listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	addrA, addrB := la.Addr().String(), lb.Addr().String()
	lb.Close() // b stands by: nothing listens there
	a := serve(t, la)
	target, opts := Target(addrB + "," + addrA)
	cc, err := grpc.NewClient(target, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	// A call made as the connection breaks fails (Unavailable), and the
	// caller tries again, as the agents' and roles' loops do.
	check := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: %v", what, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check("with a serving")
	a.Stop() // the leader dies; b takes over on its address
	b := serve(t, listen(t, addrB))
	defer b.Stop()
	check("after the takeover by b")
}
