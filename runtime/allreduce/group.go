package allreduce

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strconv"
	"sync"

	"github.com/kelpie/kelpie/core/reduceplan"
	"github.com/kelpie/kelpie/core/topology"
)

// GroupConfig is one worker's place in its job's allreduce group.
type GroupConfig struct {
	// Self is this worker's index in the job (worker-Self).
	Self int
	// Job names the group; meshes of different memberships are told
	// apart too (a worker of another membership is refused).
	Job string
	// Listener accepts the other members' connections, mesh after mesh;
	// the caller closes it.
	Listener net.Listener
	// Resolve gives a worker's current address (it changes when the worker
	// restarts), asked again on every dial attempt.
	Resolve func(ctx context.Context, worker int) (string, error)
	// Dial opens a connection (nil: plain TCP).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Security authenticates the members to each other (Config.Security).
	Security *Security
	// NodeName names a worker (spec.WorkerName), which an encrypted
	// peer's certificate must name.
	NodeName func(worker int) string
	// Place is a worker's place in the topology, for the plans and the
	// byte counters.
	Place func(worker int) topology.Place
	// Kind is the plan: "ring" or "rat".
	Kind string
	// BeforeSend runs before this worker sends in each step of a plan
	// (Config.BeforeSend).
	BeforeSend func(ctx context.Context, step int)
}

// Group is one worker's allreduce group over the job's life: its members
// change at iteration boundaries (workers added, removed, restarted), and
// each membership gets a mesh of its own (Form) and plans built for it:
// the tree or ring is rebuilt. Bytes count over every mesh. One goroutine
// at a time may call Form and Run; the counters may be read from any.
type Group struct {
	cfg     GroupConfig
	members []int // worker indexes, ascending; plan node k is members[k]
	x       *Exchange
	plans   map[int]*reduceplan.Plan // by vector length, for these members

	mu       sync.Mutex
	sentDone int64                     // payload bytes sent on meshes closed
	pairDone map[reduceplan.Pair]int64 // and those across regions
}

// NewGroup returns a group with no mesh yet.
func NewGroup(cfg GroupConfig) *Group {
	return &Group{cfg: cfg, pairDone: map[reduceplan.Pair]int64{}}
}

// Members are the workers of the current mesh.
func (g *Group) Members() []int { return slices.Clone(g.members) }

// Pos is this worker's position among the members (-1 when not one).
func (g *Group) Pos() int { return slices.Index(g.members, g.cfg.Self) }

// Form closes the current mesh and connects one among members (worker
// indexes, this worker among them), retrying until ctx ends: peers start,
// restart and finish their iterations at different times.
func (g *Group) Form(ctx context.Context, members []int) error {
	members = slices.Clone(members)
	slices.Sort(members)
	members = slices.Compact(members)
	self := slices.Index(members, g.cfg.Self)
	if self < 0 {
		return fmt.Errorf("allreduce: worker %d is not among the members %v", g.cfg.Self, members)
	}
	g.closeMesh()
	g.members, g.plans = members, map[int]*reduceplan.Plan{}
	cfg := Config{
		Self: self, Addrs: make([]string, len(members)), Listener: g.cfg.Listener, KeepListener: true,
		Group: g.groupName(), Dial: g.cfg.Dial, BeforeSend: g.cfg.BeforeSend, Security: g.cfg.Security,
		Resolve: func(ctx context.Context, j int) (string, error) { return g.cfg.Resolve(ctx, members[j]) },
		Region:  func(j int) string { return topology.Region(g.place(members[j])) },
	}
	if g.cfg.NodeName != nil {
		cfg.Name = func(j int) string { return g.cfg.NodeName(members[j]) }
	}
	x, err := Connect(ctx, cfg)
	if err != nil {
		return fmt.Errorf("allreduce: worker %d joining %v: %w", g.cfg.Self, members, err)
	}
	g.mu.Lock()
	g.x = x
	g.mu.Unlock()
	return nil
}

// groupName tells meshes of different memberships apart at the handshake.
func (g *Group) groupName() string {
	h := fnv.New64a()
	for _, m := range g.members {
		h.Write(strconv.AppendInt(nil, int64(m), 10))
		h.Write([]byte{','})
	}
	name := fmt.Sprintf("%.200s/%d/%x", g.cfg.Job, len(g.members), h.Sum64())
	return name
}

func (g *Group) place(w int) topology.Place {
	if g.cfg.Place == nil {
		return topology.Place{}
	}
	return g.cfg.Place(w)
}

// Topology is the members' places, by position.
func (g *Group) Topology() topology.Topology {
	t := make(topology.Topology, len(g.members))
	for i, w := range g.members {
		t[i] = g.place(w)
	}
	return t
}

// Plan is the group's plan for vectors of n elements (built once per
// membership).
func (g *Group) Plan(n int) *reduceplan.Plan {
	if p, ok := g.plans[n]; ok {
		return p
	}
	var p *reduceplan.Plan
	if g.cfg.Kind == "ring" {
		p = reduceplan.Ring(len(g.members), n, g.Topology())
	} else {
		p = reduceplan.RAT(len(g.members), n, g.Topology(), 0)
	}
	g.plans[n] = p
	return p
}

// Run sums vec across the members, in place. After an error the mesh is
// dead: Form a new one.
func (g *Group) Run(ctx context.Context, vec []float32) error {
	if g.x == nil {
		return fmt.Errorf("allreduce: worker %d has no mesh", g.cfg.Self)
	}
	return g.x.Run(ctx, g.Plan(len(vec)), vec)
}

// closeMesh closes the current mesh and keeps its counts.
func (g *Group) closeMesh() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.x == nil {
		return
	}
	g.x.Close()
	g.sentDone += sum(g.x.Sent())
	for k, v := range g.x.Bytes() {
		g.pairDone[k] += v
	}
	g.x = nil
}

// Close closes the current mesh (not the listener).
func (g *Group) Close() { g.closeMesh() }

// Sent is the payload bytes this worker has sent, over every mesh.
func (g *Group) Sent() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.sentDone
	if g.x != nil {
		n += sum(g.x.Sent())
	}
	return n
}

// Bytes is what this worker has sent across regions, by region pair, over
// every mesh.
func (g *Group) Bytes() map[reduceplan.Pair]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[reduceplan.Pair]int64, len(g.pairDone))
	for k, v := range g.pairDone {
		out[k] = v
	}
	if g.x != nil {
		for k, v := range g.x.Bytes() {
			out[k] += v
		}
	}
	return out
}

// CrossBytes is the total of Bytes.
func (g *Group) CrossBytes() int64 {
	var n int64
	for _, v := range g.Bytes() {
		n += v
	}
	return n
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}
