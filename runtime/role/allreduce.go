package role

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/kelpie/kelpie/runtime/allreduce"
	"github.com/kelpie/kelpie/runtime/job"
	"github.com/kelpie/kelpie/runtime/model"
	"github.com/kelpie/kelpie/runtime/spec"
	"github.com/kelpie/kelpie/runtime/worker"
)

// connectTimeout bounds how long a worker waits for its allreduce peers.
const connectTimeout = time.Minute

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
func Topology(s *spec.Spec) allreduce.Topology {
	names := s.WorkerNames()
	t := make(allreduce.Topology, len(names))
	for i, n := range names {
		l := s.Cluster.Topology[n]
		t[i] = allreduce.Place{Rack: l.Rack, Pod: l.Pod}
	}
	return t
}

// Plan returns the job's allreduce plan over a model's dense tensors laid end
// to end and one more value (see worker.Allreduce).
func Plan(s *spec.Spec, m model.Model) *allreduce.Plan {
	n := 1 // after the tensors, a flag: the worker has data for the next iteration
	for _, t := range m.Tensors() {
		n += t.Len()
	}
	topo := Topology(s)
	if s.Cluster.Exchange == spec.ExchangeRing {
		return allreduce.Ring(s.Cluster.Workers, n, topo)
	}
	return allreduce.RAT(s.Cluster.Workers, n, topo, 0)
}

// joinAllreduce connects worker idx to its peers (addresses from the
// coordinator, by worker index) and returns its allreduce settings. The
// listener passes to the Exchange, which closes it.
func joinAllreduce(ctx context.Context, o Options, s *spec.Spec, m model.Model, idx int, lis net.Listener, peers []string) (*worker.Allreduce, error) {
	if len(peers) != s.Cluster.Workers {
		lis.Close()
		return nil, fmt.Errorf("worker %s: the coordinator gave %d peer addresses for %d workers", o.Node, len(peers), s.Cluster.Workers)
	}
	for i, p := range peers {
		if p == "" {
			lis.Close()
			return nil, fmt.Errorf("worker %s: worker-%d has no peer address", o.Node, i)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	topo := Topology(s)
	x, err := allreduce.Connect(ctx, allreduce.Config{Self: idx, Addrs: peers, Listener: lis, Group: s.Name, Region: topo.RackRegion()})
	if err != nil {
		return nil, fmt.Errorf("worker %s: %v", o.Node, err)
	}
	return &worker.Allreduce{Exchange: x, Plan: Plan(s, m), Optim: job.OptimConfig(s), Init: m.InitDense(s.Data.Seed)}, nil
}

// region is a node's rack region by name (cluster.topology; unlabelled
// nodes share one region).
func region(s *spec.Spec, node string) string {
	l := s.Cluster.Topology[node]
	return allreduce.Region(allreduce.Place{Rack: l.Rack, Pod: l.Pod})
}

// crossRegionComm sums the bytes of a PS worker's exchanges with servers in
// other regions than its own (pushed and pulled: both cross).
func crossRegionComm(s *spec.Spec, node string, comm []worker.Comm) int64 {
	if len(s.Cluster.Topology) == 0 {
		return 0
	}
	me := region(s, node)
	var n int64
	for _, c := range comm {
		if region(s, fmt.Sprintf("server-%d", c.Server)) != me {
			n += c.Bytes
		}
	}
	return n
}
