package role

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/psclient"
)

// Bounds of a probe (kelpie job probe), whatever the request asks.
const (
	probeMaxRounds  = 20
	probeDefRounds  = 12
	probeMaxEcho    = 256 << 10
	probeDefEcho    = 64 << 10
	probeMaxTrips   = 5
	probeDefTrips   = 4
	probeMaxServers = 64
	probeMaxWait    = time.Minute
	probeDefWait    = 8 * time.Second
	// kernelSize is the side of the kernel's matrices: one round is a
	// kernelSize³ multiply-add, a few milliseconds on a core.
	kernelSize = 128
)

// prober runs a role's probe: the kernel under the node's injected
// slowness, as the role's own compute runs under it (an emulated slow
// device slows the kernel as it slows an iteration), and a worker's round
// trips to the servers.
type prober struct {
	sched straggler.Schedule
	start time.Time // the job's start (injections are timed from it)
	dial  []grpc.DialOption
}

// setProber makes the channel answer probes with p (before it is set, a
// probe is answered with an error: the role is not ready yet).
func (c *AgentChannel) setProber(p *prober) {
	c.mu.Lock()
	c.prober = p
	c.mu.Unlock()
}

// sendProbe answers the agent's ProbeRequest.
func (c *AgentChannel) sendProbe(req *agentpb.ProbeRequest) {
	c.mu.Lock()
	p := c.prober
	c.mu.Unlock()
	r := &agentpb.ProbeReply{Id: req.GetId()}
	if p == nil {
		r.Error = "the role is not ready for a probe (it has not started training or serving)"
	} else {
		p.run(req, r)
	}
	_ = c.Send(&agentpb.RoleMessage{Body: &agentpb.RoleMessage_Probe{Probe: r}})
}

// run fills r: the kernel's time, then the round trips to each server
// (concurrently: a slow one does not hold up the others), within the
// request's timeout.
func (p *prober) run(req *agentpb.ProbeRequest, r *agentpb.ProbeReply) {
	wait := bounded(time.Duration(req.GetTimeoutS()*float64(time.Second)), probeDefWait, probeMaxWait)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	rounds := int(bounded(req.GetKernelRounds(), probeDefRounds, probeMaxRounds))
	took, ran := p.kernel(ctx, rounds)
	r.KernelS, r.KernelRounds = took.Seconds(), int32(ran)
	var errs []string
	if ran < rounds {
		errs = append(errs, fmt.Sprintf("the kernel ran %d of %d rounds within %s", ran, rounds, wait))
	}
	servers := req.GetServers()
	if len(servers) > probeMaxServers {
		servers = servers[:probeMaxServers]
		errs = append(errs, fmt.Sprintf("only the first %d servers reached", probeMaxServers))
	}
	echo := int(bounded(req.GetEchoBytes(), probeDefEcho, probeMaxEcho))
	trips := int(bounded(req.GetTrips(), probeDefTrips, probeMaxTrips))
	r.Trips = make([]*agentpb.ProbeTrip, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Trips[i] = p.trip(ctx, s, echo, trips)
		}()
	}
	wg.Wait()
	r.Error = strings.Join(errs, "; ")
}

// kernel runs rounds of the fixed compute kernel (a matrix product), each
// followed by the delay the node's injections add to that much compute,
// and says the lower quartile of the rounds' times (robust to a busy host
// taking the core for up to three rounds in four; a slow device or an
// injected delay slows every round) and how many rounds ran before ctx
// ended.
func (p *prober) kernel(ctx context.Context, rounds int) (time.Duration, int) {
	a, b, c := kernelMatrix(1), kernelMatrix(2), make([]float32, kernelSize*kernelSize)
	took := make([]float64, 0, rounds)
	for range rounds {
		if ctx.Err() != nil {
			break
		}
		r0 := time.Now()
		if d := p.sched.Pause(time.Since(p.start)); d > 0 {
			sleepCtx(ctx, d)
		}
		matmul(c, a, b)
		if d := p.sched.ComputeDelay(time.Since(p.start), time.Since(r0), rand.Float64()); d > 0 {
			sleepCtx(ctx, d)
		}
		took = append(took, time.Since(r0).Seconds())
		a, c = c, a // the next round multiplies the result: nothing to hoist
	}
	return time.Duration(quartile(took) * float64(time.Second)), len(took)
}

// trip makes n round trips of echo bytes each way to server s and keeps
// the fastest (a slow link or server slows every one; a busy host only
// some) with the server's own share of it.
func (p *prober) trip(ctx context.Context, s *agentpb.ProbeServer, echo, n int) *agentpb.ProbeTrip {
	t := &agentpb.ProbeTrip{Server: s.GetName(), Bytes: int64(echo)}
	cc, err := grpc.NewClient("passthrough:///"+s.GetAddr(), p.dial...)
	if err != nil {
		t.Error = err.Error()
		return t
	}
	defer cc.Close()
	c := pspb.NewParameterServerClient(cc)
	data := make([]byte, echo)
	for i := range data {
		data[i] = byte(i)
	}
	// The connection first: its handshake is not the link's round trip.
	cc.Connect()
	for range n {
		t0 := time.Now()
		r, err := c.Probe(ctx, &pspb.ProbeEcho{Data: data}, grpc.WaitForReady(true))
		if err != nil {
			t.Error = err.Error()
			break
		}
		if len(r.GetData()) != echo {
			t.Error = fmt.Sprintf("the echo came back with %d bytes of %d", len(r.GetData()), echo)
			break
		}
		if rtt := time.Since(t0).Seconds(); t.RttS == 0 || rtt < t.RttS {
			t.RttS, t.ServerS = rtt, r.GetServerSeconds()
		}
	}
	return t
}

// probeDialOptions are a worker's options to reach its servers' gRPC side
// (the data plane's, bounded to what a probe carries).
func probeDialOptions() []grpc.DialOption {
	return append(psclient.DialOptions(), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(2*probeMaxEcho)))
}

func kernelMatrix(seed int) []float32 {
	m := make([]float32, kernelSize*kernelSize)
	for i := range m {
		m[i] = float32((i*seed)%17-8) / 64
	}
	return m
}

// matmul sets c = a·b (kernelSize square, row-major).
func matmul(c, a, b []float32) {
	const n = kernelSize
	clear(c)
	for i := range n {
		ci := c[i*n : (i+1)*n]
		for k := range n {
			aik := a[i*n+k]
			bk := b[k*n : (k+1)*n]
			for j := range n {
				ci[j] += aik * bk[j]
			}
		}
	}
	// Keep the values bounded: the rounds chain their products.
	for i := range c {
		c[i] /= n
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// bounded is v, def when v ≤ 0, at most most.
func bounded[T int32 | time.Duration](v, def, most T) T {
	if v <= 0 {
		v = def
	}
	return min(v, most)
}

// quartile is the lower quartile of xs (0 when empty).
func quartile(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/4]
}
