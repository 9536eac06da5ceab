package role

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/reduceplan"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/core/topology"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/runtime/allreduce"
	"github.com/kelpie/kelpie/runtime/model"
	"github.com/kelpie/kelpie/runtime/worker"
)

// isAllreduce says whether the job's workers sum gradients among
// themselves (cluster.exchange ring or rat).
func isAllreduce(s *spec.Spec) bool {
	return s.Cluster.Exchange == spec.ExchangeRing || s.Cluster.Exchange == spec.ExchangeRAT
}

// peerListener opens the address an allreduce worker's peers connect to:
// Options.Listen, or a free port on the address this host reaches the
// coordinator from (127.0.0.1 when the coordinator is on loopback; the
// host's own address when hosts have their own, as in a netns network or
// a cluster).
func peerListener(o Options) (net.Listener, error) {
	addr := o.Listen
	if addr == "" {
		addr = net.JoinHostPort(outboundIP(o.Coordinator), "0")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("worker %s: allreduce listen: %v", o.Node, err)
	}
	return l, nil
}

// outboundIP is the local address this host uses to reach addr (a UDP
// "connection" sends nothing; it only picks the route), 127.0.0.1 when it
// cannot tell.
func outboundIP(addr string) string {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	if a, ok := c.LocalAddr().(*net.UDPAddr); ok && a.IP != nil && !a.IP.IsUnspecified() {
		return a.IP.String()
	}
	return "127.0.0.1"
}

// Topology returns the job's workers' places (cluster.topology) by worker
// index.
func Topology(s *spec.Spec) topology.Topology {
	names := s.WorkerNames()
	t := make(topology.Topology, len(names))
	for i, n := range names {
		l := s.Cluster.Topology[n]
		t[i] = topology.Place{Rack: l.Rack, Pod: l.Pod}
	}
	return t
}

// Plan returns the job's allreduce plan over a model's dense tensors laid end
// to end and one more value (see worker.Allreduce).
func Plan(s *spec.Spec, m model.Model) *reduceplan.Plan {
	n := 1 // after the tensors, a flag: the worker has data for the next iteration
	for _, t := range m.Tensors() {
		n += t.Len()
	}
	topo := Topology(s)
	if s.Cluster.Exchange == spec.ExchangeRing {
		return reduceplan.Ring(s.Cluster.Workers, n, topo)
	}
	return reduceplan.RAT(s.Cluster.Workers, n, topo, 0)
}

// newAllreduce is worker idx's allreduce group: its members are the
// workers the job's latest batch split gives samples (an added worker,
// which no split covers yet, waits for the one that takes it in); peers'
// addresses come from the coordinator, asked again whenever a dial fails
// (a restarted worker registers a new one); the worker's injected pauses
// (stragglers of kind pause) also hold its sends in the exchange, as a
// node that stops sending (RAT §4). Peers prove the job's data-plane
// secret to each other and, with data_plane_encryption: on, talk TLS with
// their node certificates (peerSecurity). The listener stays the caller's.
func newAllreduce(o Options, s *spec.Spec, m model.Model, idx int, lis net.Listener, coord coordinatorpb.CoordinatorClient,
	peers []string, plan job.Plan, sched straggler.Schedule, start time.Time) (*worker.Allreduce, error) {
	sec, err := peerSecurity(&o, s)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	known := slices.Clone(peers)
	resolve := func(ctx context.Context, w int) (string, error) {
		mu.Lock()
		if w < len(known) && known[w] != "" {
			// The first dial uses what Ready said; a failed one asks
			// again.
			a := known[w]
			known[w] = ""
			mu.Unlock()
			return a, nil
		}
		mu.Unlock()
		// Not under mu: the dials to the other peers do not queue behind
		// this one's call (which the dial attempt's context bounds).
		r, err := coord.Ready(ctx, &coordinatorpb.ReadyRequest{Job: o.Job, Node: o.Node})
		if err != nil {
			return "", err
		}
		if w >= len(r.Peers) || r.Peers[w] == "" {
			return "", fmt.Errorf("worker-%d has no address yet", w)
		}
		return r.Peers[w], nil
	}
	var members []int
	for i, b := range plan.LocalAt(math.MaxInt64) {
		if b > 0 {
			members = append(members, i)
		}
	}
	g := allreduce.NewGroup(allreduce.GroupConfig{
		Self: idx, Job: s.Name, Listener: lis, Resolve: resolve, Kind: s.Cluster.Exchange,
		Security: sec, NodeName: spec.WorkerName,
		Place: func(w int) topology.Place {
			l := s.Cluster.Topology[spec.WorkerName(w)]
			return topology.Place{Rack: l.Rack, Pod: l.Pod}
		},
		BeforeSend: func(ctx context.Context, _ int) {
			if d := sched.Pause(time.Since(start)); d > 0 {
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
				}
			}
		},
	})
	return &worker.Allreduce{Group: g, Members: members, Await: !slices.Contains(members, idx),
		Optim: job.OptimConfig(s), Init: m.InitDense(s.Data.Seed)}, nil
}

// peerSecurity is how a worker's allreduce peers authenticate each other:
// as its framed connections to parameter servers do (the job's secret;
// TLS with the node certificates when the data plane is encrypted, the
// peer's certificate then naming the worker it claims to be).
func peerSecurity(o *Options, s *spec.Spec) (*allreduce.Security, error) {
	sec := &allreduce.Security{Credentials: o.dataCredentials(), Log: o.log()}
	if s.Cluster.DataPlaneEncryption == spec.EncryptionOn {
		var err error
		if sec.ServerTLS, sec.ClientTLS, err = identity.ProcessPeerTLS(); err != nil {
			return nil, err
		}
		sec.PeerNode = func(cs tls.ConnectionState) (string, error) {
			id, err := identity.TLSPeer(cs)
			return id.Node, err
		}
	}
	return sec, nil
}

// region is a node's rack region by name (cluster.topology; unlabelled
// nodes share one region).
func region(s *spec.Spec, node string) string {
	l := s.Cluster.Topology[node]
	return topology.Region(topology.Place{Rack: l.Rack, Pod: l.Pod})
}

// crossRegionComm sums the bytes of a PS worker's exchanges with servers in
// other regions than its own (pushed and pulled: both cross).
func crossRegionComm(s *spec.Spec, node string, comm []worker.Comm) int64 {
	var n int64
	for _, b := range regionPairsComm(s, node, comm) {
		n += b
	}
	return n
}

// regionPairsComm is what a PS worker's exchanges moved between regions, by
// region pair: its pushes from its region to the server's, its pulls back
// (nothing without a topology).
func regionPairsComm(s *spec.Spec, node string, comm []worker.Comm) map[reduceplan.Pair]int64 {
	out := map[reduceplan.Pair]int64{}
	if len(s.Cluster.Topology) == 0 {
		return out
	}
	me := region(s, node)
	for _, c := range comm {
		if r := region(s, spec.ServerName(c.Server)); r != me {
			if push := c.Bytes - c.Pulled; push > 0 {
				out[reduceplan.Pair{From: me, To: r}] += push
			}
			if c.Pulled > 0 {
				out[reduceplan.Pair{From: r, To: me}] += c.Pulled
			}
		}
	}
	return out
}

// regionTally turns a worker's bytes by region pair into the deltas its
// reports carry (coordinatorpb.RegionBytes), the scheduler adding them up.
type regionTally struct {
	sent map[reduceplan.Pair]int64 // what earlier reports carried (allreduce: the group's totals)
}

// delta is what cur (running totals) adds to what was reported, and
// records cur as reported.
func (t *regionTally) delta(cur map[reduceplan.Pair]int64) []*coordinatorpb.RegionBytes {
	var out []*coordinatorpb.RegionBytes
	for p, b := range cur {
		if d := b - t.sent[p]; d > 0 {
			out = append(out, &coordinatorpb.RegionBytes{FromRegion: p.From, ToRegion: p.To, Bytes: d})
		}
	}
	t.sent = cur
	slices.SortFunc(out, func(a, b *coordinatorpb.RegionBytes) int {
		return cmp.Or(cmp.Compare(a.FromRegion, b.FromRegion), cmp.Compare(a.ToRegion, b.ToRegion))
	})
	return out
}

// regionBytesPB lists bytes by region pair (a PS report's own, not
// running totals), ordered.
func regionBytesPB(m map[reduceplan.Pair]int64) []*coordinatorpb.RegionBytes {
	var t regionTally
	return t.delta(m)
}
