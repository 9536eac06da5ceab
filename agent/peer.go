package agent

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	gproto "google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/proto/agentpb"
)

// The peer service: a primary agent forwards a global action to the other
// agents of its job (AntDT Fig. 6). Trust is the node plane's: the service
// runs under the node's certificate, and its guard lets in only a node of
// the same job, calling as itself (identity.AgentPeerPolicy), with a
// command the scheduler signed for that node to forward (forwardPolicy); a
// refused call is reported to the scheduler like the role's own refusals. Only the
// kinds a worker applies at an iteration boundary may be forwarded: node
// actions (KILL_RESTART) and a server's commands come from the scheduler
// only.

// forwardable are the kinds a primary may hand to a secondary.
var forwardable = map[string]bool{
	"ADJUST_BS": true, "ADD_WORKER": true, "REMOVE_WORKER": true, "ADJUST_LR": true,
	"REASSIGN": true, "ADD_SERVER": true, "REMOVE_SERVER": true,
}

// startPeers opens the peer service's listener and serves it (tracked by
// wg); it sets a.peerAddr, and returns what stops the service. Without a
// listener the agent serves none: the scheduler then sends it every
// command itself.
func (a *Agent) startPeers(wg *sync.WaitGroup) (stop func()) {
	addr := a.o.PeerListen
	if addr == "off" {
		return func() {}
	}
	if addr == "" {
		host := "127.0.0.1"
		if h, _, err := net.SplitHostPort(a.o.Listen); err == nil && h != "" {
			host = h
		}
		addr = net.JoinHostPort(host, "0")
	}
	srv, err := a.peerServer()
	var lis net.Listener
	if err == nil {
		lis, err = net.Listen("tcp", addr)
	}
	if err != nil {
		a.log.Warn("peer service not served: the scheduler sends this agent every command itself", "err", err)
		return func() {}
	}
	a.peerAddr = lis.Addr().String()
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(lis) }()
	return srv.Stop
}

// peerServer is the peer service's gRPC server: mTLS and the guard with
// the node's credentials, plaintext without them (like the role's).
func (a *Agent) peerServer() (*grpc.Server, error) {
	creds, err := a.credentials()
	if err != nil {
		return nil, err
	}
	// A forward is one small command: the node plane's limits (4 MiB a
	// message, 256 streams a connection, 10 s to finish the handshake).
	opts := identity.DefaultLimits().ServerOptions()
	if creds != nil {
		g := identity.NewGuard(forwardPolicy(creds), identity.GuardOptions{Report: func(r identity.Refusal) {
			a.enqueue(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Refusal{Refusal: r.Proto()}}, false)
		}})
		opts = append(opts, g.ServerOptionsFor(creds)...)
	}
	srv := grpc.NewServer(opts...)
	agentpb.RegisterAgentPeerServer(srv, &peerService{a: a})
	return srv, nil
}

// forwardPolicy is identity.AgentPeerPolicy, and a forwarded command must
// be one the scheduler issued (signed by it) for the caller to forward (the
// primary it designated): a node of the job cannot make an action up, nor
// forward one it was not given. A refusal is the guard's: PermissionDenied,
// reported to the scheduler's audit log.
func forwardPolicy(creds *identity.Credentials) identity.Policy {
	peer := identity.AgentPeerPolicy(creds.ID)
	return func(id identity.Identity, method string, msg gproto.Message) error {
		if err := peer(id, method, msg); err != nil {
			return err
		}
		if r, ok := msg.(*agentpb.ForwardRequest); ok {
			return creds.VerifyAction(r.GetCommand(), id.Node)
		}
		return nil
	}
}

// peerService is the agent's AgentPeer service.
type peerService struct {
	agentpb.UnimplementedAgentPeerServer
	a *Agent
}

// Forward takes a global action from the job's primary agent as if the
// scheduler had sent it (at most once: a replay from the scheduler that
// came first makes it a duplicate).
func (s *peerService) Forward(_ context.Context, r *agentpb.ForwardRequest) (*agentpb.ForwardResponse, error) {
	a := s.a
	if r.GetJob() != a.o.Job {
		return nil, status.Errorf(codes.PermissionDenied, "agent %s: a forward for job %q; this agent is of job %s", a.o.Node, r.GetJob(), a.o.Job)
	}
	c := r.GetCommand()
	if c.GetActionId() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "agent %s: a forward without an action", a.o.Node)
	}
	if !forwardable[c.Kind] {
		return nil, status.Errorf(codes.PermissionDenied, "agent %s: %s is not a global action; it comes from the scheduler only", a.o.Node, c.Kind)
	}
	c = gproto.Clone(c).(*agentpb.ActionCommand)
	c.Primary, c.Peers = false, nil // a secondary forwards nothing
	a.log.Debug("action forwarded by the primary", "action", c.ActionId, "kind", c.Kind, "from", r.GetNode())
	return &agentpb.ForwardResponse{Duplicate: !a.take(c)}, nil
}

// forward hands a global action this agent is the primary of to its
// forwarding loop; when the loop is too far behind, every secondary is
// reported unreached at once (the scheduler sends them the command).
func (a *Agent) forward(c *agentpb.ActionCommand) {
	select {
	case a.forwards <- c:
		return
	default:
	}
	rep := &agentpb.ActionForwarded{ActionId: c.ActionId}
	for _, p := range c.Peers {
		rep.Unreached = append(rep.Unreached, &agentpb.PeerFailure{Peer: p.Peer, Error: "the primary's forwarding queue is full"})
	}
	a.enqueue(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Forwarded{Forwarded: rep}}, true)
}

// peerKey names a connection to a secondary: its certificate must name the
// node, so the node is part of the key.
type peerKey struct{ node, addr string }

// forwardLoop forwards each global action this agent is the primary of to
// its secondaries, one action at a time, the secondaries in parallel, and
// tells the scheduler the outcome. It owns the connections to the peers
// and closes them when ctx ends.
func (a *Agent) forwardLoop(ctx context.Context) {
	conns := map[peerKey]*grpc.ClientConn{}
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	for {
		select {
		case c := <-a.forwards:
			a.broadcast(ctx, c, conns)
		case <-ctx.Done():
			return
		}
	}
}

// broadcast forwards one action to its secondaries and reports the outcome.
func (a *Agent) broadcast(ctx context.Context, c *agentpb.ActionCommand, conns map[peerKey]*grpc.ClientConn) {
	fwd := gproto.Clone(c).(*agentpb.ActionCommand)
	fwd.Primary, fwd.Peers = false, nil
	req := &agentpb.ForwardRequest{Job: a.o.Job, Node: a.o.Node, Command: fwd}
	creds, credErr := a.credentials()
	if len(conns) >= 1<<12 {
		// Bounded: agents that moved leave their old addresses behind.
		for k, cc := range conns {
			cc.Close()
			delete(conns, k)
		}
	}
	errs := make([]error, len(c.Peers))
	var wg sync.WaitGroup
	for i, p := range c.Peers {
		if p.Peer == a.o.Node {
			continue
		}
		if credErr != nil {
			errs[i] = credErr
			continue
		}
		k := peerKey{p.Peer, p.Addr}
		cc := conns[k]
		if cc == nil {
			var err error
			if cc, err = grpc.NewClient(p.Addr, creds.DialOption(identity.NodeOf(a.o.Job, p.Peer))); err != nil {
				errs[i] = err
				continue
			}
			conns[k] = cc
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, a.o.PeerTimeout)
			defer cancel()
			_, errs[i] = agentpb.NewAgentPeerClient(cc).Forward(cctx, req)
		}()
	}
	wg.Wait()
	rep := &agentpb.ActionForwarded{ActionId: c.ActionId}
	for i, p := range c.Peers {
		switch {
		case p.Peer == a.o.Node:
		case errs[i] == nil:
			rep.Reached = append(rep.Reached, p.Peer)
		default:
			st := status.Convert(errs[i])
			rep.Unreached = append(rep.Unreached, &agentpb.PeerFailure{Peer: p.Peer, Error: st.Code().String() + ": " + st.Message()})
		}
	}
	if len(rep.Unreached) > 0 {
		a.log.Warn("primary: some secondaries not reached; the scheduler sends them the action", "action", c.ActionId,
			"reached", len(rep.Reached), "unreached", len(rep.Unreached))
	}
	a.enqueue(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Forwarded{Forwarded: rep}}, true)
}
