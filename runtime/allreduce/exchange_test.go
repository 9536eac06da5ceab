package allreduce

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/reduceplan"
	"github.com/kelpie/kelpie/core/topology"
	"github.com/kelpie/kelpie/runtime/framing"
)

// group starts n nodes' Exchanges on 127.0.0.1.
func group(t *testing.T, n int, name string, region func(int) string) []*Exchange {
	t.Helper()
	lis := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	xs := make([]*Exchange, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			xs[i], errs[i] = Connect(ctx, Config{Self: i, Addrs: addrs, Listener: lis[i], Group: name, Region: region})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		t.Cleanup(xs[i].Close)
	}
	return xs
}

// runAll runs p on every node at once.
func runAll(ctx context.Context, xs []*Exchange, p *reduceplan.Plan, vecs [][]float32) []error {
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for i, x := range xs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = x.Run(ctx, p, vecs[i])
		}()
	}
	wg.Wait()
	return errs
}

// TestExchangeMatchesSimulate runs every plan over real TCP connections,
// several times on the same mesh, and checks each node ends with exactly the
// bits Simulate computes, and that the byte counters match the plan's.
func TestExchangeMatchesSimulate(t *testing.T) {
	topo := racks(3, 3)
	region := topo.RackRegion()
	xs := group(t, 6, "job-a", region)
	const n = 10007
	for round, p := range []*reduceplan.Plan{reduceplan.Ring(6, n, topo), reduceplan.RAT(6, n, topo, 0), reduceplan.PS(6, n), reduceplan.RAT(6, n, topo, 2), reduceplan.Ring(6, n, topo)} {
		rng := rand.New(rand.NewPCG(7, uint64(round)))
		vecs, want := make([][]float32, 6), make([][]float32, 6)
		for i := range vecs {
			vecs[i] = make([]float32, n)
			for j := range vecs[i] {
				vecs[i][j] = float32(rng.NormFloat64())
			}
			want[i] = append([]float32(nil), vecs[i]...)
		}
		if err := p.Simulate(want); err != nil {
			t.Fatal(err)
		}
		before := make([]int64, 6)
		for i, x := range xs {
			before[i] = x.CrossBytes()
		}
		for i, err := range runAll(context.Background(), xs, p, vecs) {
			if err != nil {
				t.Fatalf("%s: node %d: %v", p.Kind, i, err)
			}
		}
		for i := range vecs {
			for j := range vecs[i] {
				if vecs[i][j] != want[i][j] {
					t.Fatalf("%s: node %d element %d = %v; Simulate gives %v", p.Kind, i, j, vecs[i][j], want[i][j])
				}
			}
		}
		var cross int64
		for i, x := range xs {
			cross += x.CrossBytes() - before[i]
		}
		if w := p.CrossBytes(region); cross != w {
			t.Errorf("%s: nodes counted %d cross-rack bytes; the plan sends %d", p.Kind, cross, w)
		}
	}
}

// TestExchangeRefusesStrangers: a node of another group, or garbage, is
// refused at the handshake and the mesh still forms.
func TestExchangeRefusesStrangers(t *testing.T) {
	lis := make([]net.Listener, 2)
	addrs := make([]string, 2)
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	// Strangers knock on node 0 first.
	for _, hello := range [][]byte{[]byte("GET / HTTP/1.1\r\n\r\n"), append([]byte("KLAR\x01\x01\x00\x00\x00\x05"), "job-b"...)} {
		c, err := net.Dial("tcp", addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		c.Write(hello)
		defer c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	xs := make([]*Exchange, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			xs[i], errs[i] = Connect(ctx, Config{Self: i, Addrs: addrs, Listener: lis[i], Group: "job-a"})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		defer xs[i].Close()
	}
	v := [][]float32{{1, 2}, {3, 4}}
	for i, err := range runAll(ctx, xs, reduceplan.Ring(2, 2, nil), v) {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	if v[0][0] != 4 || v[1][1] != 6 {
		t.Errorf("sums %v; want [[4 6] [4 6]]", v)
	}
}

// TestExchangeCancel: a node whose peer never takes part is released by its
// context, with an error, and the Exchange stays failed.
func TestExchangeCancel(t *testing.T) {
	xs := group(t, 3, "job-c", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	p := reduceplan.RAT(3, 30, nil, 0)
	for i := range 2 { // node 2 never runs
		go func() { done <- xs[i].Run(ctx, p, make([]float32, 30)) }()
	}
	cancel()
	for range 2 {
		if err := <-done; err == nil {
			t.Fatal("Run returned nil with a peer missing")
		}
	}
	if err := xs[0].Run(context.Background(), p, make([]float32, 30)); !errors.Is(err, context.Canceled) && (err == nil || !strings.Contains(err.Error(), "allreduce")) {
		t.Errorf("Run on a failed exchange = %v; want the earlier error", err)
	}
}

func TestConnectTimesOutOnMissingPeer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = Connect(ctx, Config{Self: 0, Addrs: []string{l.Addr().String(), addr}, Listener: l, Group: "g"})
	if err == nil || !strings.Contains(err.Error(), "node 1") {
		t.Errorf("Connect = %v; want an error naming node 1", err)
	}
}

// racks returns a topology of len(sizes) racks in one pod.
func racks(sizes ...int) topology.Topology {
	var t topology.Topology
	for r, n := range sizes {
		for range n {
			t = append(t, topology.Place{Rack: fmt.Sprintf("r%d", r)})
		}
	}
	return t
}

// swallowing is a listener that takes its first connection and never
// hands it on (nor answers on it): an attempt lost between two peers.
type swallowing struct {
	net.Listener
	once sync.Once
	held chan net.Conn
}

func (l *swallowing) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		first := false
		l.once.Do(func() { first = true })
		if !first {
			return c, nil
		}
		l.held <- c
	}
}

// TestDialRetriesALostAttempt: an attempt to reach a peer that is never
// answered is given up after the attempt's bound and made again, so the
// mesh forms; it does not wait for the whole time given to Connect (which
// here is only a guard against a hang).
func TestDialRetriesALostAttempt(t *testing.T) {
	var lis [2]net.Listener
	addrs := make([]string, 2)
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	sw := &swallowing{Listener: lis[1], held: make(chan net.Conn, 1)}
	defer func() {
		select {
		case c := <-sw.held:
			c.Close()
		default:
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	xs := make([]*Exchange, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, l := range []net.Listener{lis[0], sw} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			xs[i], errs[i] = Connect(ctx, Config{Self: i, Addrs: addrs, Listener: l, Group: "lost",
				AttemptTimeout: 200 * time.Millisecond})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v (a lost attempt was not made again)", i, err)
		}
		defer xs[i].Close()
	}
	if len(sw.held) != 1 {
		t.Fatal("the listener swallowed no attempt: the test tests nothing")
	}
	v := [][]float32{{1, 2}, {3, 4}}
	for _, err := range runAll(ctx, xs, reduceplan.Ring(2, 2, nil), v) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if v[0][0] != 4 || v[1][1] != 6 {
		t.Errorf("sums %v; want [[4 6] [4 6]]", v)
	}
}

// TestPeerLeavingFailsRun: a peer that closes its end of the mesh (here
// node 1 closes the connection node 0 sends on, and never runs) fails
// node 0's Run, even while node 0 waits to receive from it over the other
// connection, which stays open; it does not hang (the context here is only
// a guard against that).
func TestPeerLeavingFailsRun(t *testing.T) {
	xs := group(t, 2, "job-leave", nil)
	xs[1].in[0].Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := xs[0].Run(ctx, reduceplan.Ring(2, 4, nil), make([]float32, 4))
	if err == nil || !strings.Contains(err.Error(), "closed its end") {
		t.Fatalf("Run = %v; want it failed by node 1 closing its end", err)
	}
}

// TestAbandonedAttemptIsDialledAgain: node 1 welcomes node 0's dial and
// dials node 0, then gives its attempt up (its time runs out while node 2
// is still away) and forms again on the same listener. Node 0, still
// forming, holds a connection node 1 has closed and one from node 1's
// first attempt: it must dial node 1 anew and take its new connection, so
// that the three form once node 2 comes; holding on to the closed one
// leaves node 1 waiting for a dial that never comes (TestAllreduceElastic
// hung so for minutes under load: the workers' meshes after a restart).
func TestAbandonedAttemptIsDialledAgain(t *testing.T) {
	lis, addrs := listeners(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The workers' security (a shared secret) as in a job: an attempt its
	// dialler gave up fails the handshake, where without it an attempt
	// left in the listener's queue would pass.
	sec := &Security{Credentials: framing.SharedSecret([]byte("again"))}
	cfg := func(i int) Config {
		return Config{Self: i, Addrs: addrs, Listener: lis[i], KeepListener: true, Group: "again",
			AttemptTimeout: 500 * time.Millisecond, Security: sec}
	}
	xs := make([]*Exchange, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		xs[0], errs[0] = Connect(ctx, cfg(0))
	}()
	go func() {
		defer wg.Done()
		// Node 1's first attempt: it meets node 0, waits for node 2, and
		// gives up; then it forms again.
		first, cancelFirst := context.WithTimeout(ctx, 1500*time.Millisecond)
		x, err := Connect(first, cfg(1))
		cancelFirst()
		if err == nil {
			x.Close()
			errs[1] = errors.New("node 1's first attempt formed without node 2")
			wg.Done() // node 2's
			return
		}
		go func() { // node 2 comes once node 1 forms again
			time.Sleep(200 * time.Millisecond)
			xs[2], errs[2] = Connect(ctx, cfg(2))
			wg.Done()
		}()
		xs[1], errs[1] = Connect(ctx, cfg(1))
	}()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		defer xs[i].Close()
	}
	v := [][]float32{{1}, {2}, {3}}
	for i, err := range runAll(ctx, xs, reduceplan.Ring(3, 1, nil), v) {
		if err != nil {
			t.Fatalf("node %d: Run: %v", i, err)
		}
	}
	for i := range v {
		if v[i][0] != 6 {
			t.Errorf("node %d sums to %v; want 6", i, v[i][0])
		}
	}
}
