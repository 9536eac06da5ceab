package identity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/proto/pspb"
)

// Policy decides whether id may call method with msg: msg is nil when a
// call (or stream) starts and each request message after that. A non-nil
// error refuses the call with PermissionDenied.
type Policy func(id Identity, method string, msg proto.Message) error

// Refusal is one refused call.
type Refusal struct {
	Time   time.Time
	Addr   string   // the caller's address
	ID     Identity // zero when the caller had no certificate
	Method string
	Code   codes.Code
	Reason string
	// Suppressed is how many refusals were not reported since the last
	// reported one (the report rate is limited).
	Suppressed uint64
}

// Guard enforces a Policy on a gRPC server: a tap that refuses a stream
// whose caller may not call its method before a byte of its body is read,
// and unary and stream interceptors that check every request message too.
// The caller's identity is its client certificate, required and verified
// in the TLS handshake (ServerTLS); a failed handshake is refused like a
// call (method HandshakeMethod, Unauthenticated) when the server's
// credentials come from ServerOptionsFor. Health answers any identity.
type Guard struct {
	policy Policy
	report func(Refusal)
	count  func(string, codes.Code)
	now    func() time.Time

	limiter    *rate.Limiter
	every      time.Duration
	mu         sync.Mutex
	suppressed uint64
	last       map[string]time.Time // refusal kind -> when it was last reported

	refused [17]atomic.Uint64 // by code
}

// GuardOptions tune a Guard.
type GuardOptions struct {
	// Report receives refusals (audit log, logs): one per caller address,
	// identity and method each ReportEvery (default a minute), and at most
	// ReportRate a second with bursts of ReportBurst over all (defaults 5
	// and 20); the others are counted and the next report says how many. A
	// flood of refusals cannot fill the audit log.
	Report func(Refusal)
	// Count is called for every refusal, reported or not (metrics).
	Count       func(method string, code codes.Code)
	ReportRate  float64
	ReportBurst int
	ReportEvery time.Duration
	Now         func() time.Time
}

// NewGuard returns a guard for policy.
func NewGuard(policy Policy, o GuardOptions) *Guard {
	if o.ReportRate <= 0 {
		o.ReportRate = 5
	}
	if o.ReportBurst <= 0 {
		o.ReportBurst = 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ReportEvery <= 0 {
		o.ReportEvery = time.Minute
	}
	return &Guard{policy: policy, report: o.Report, count: o.Count, now: o.Now, every: o.ReportEvery, last: map[string]time.Time{},
		limiter: rate.NewLimiter(rate.Limit(o.ReportRate), o.ReportBurst)}
}

// Refused is how many calls were refused with code.
func (g *Guard) Refused(code codes.Code) uint64 {
	if int(code) >= len(g.refused) {
		return 0
	}
	return g.refused[code].Load()
}

// ServerOptions are the tap and the interceptors.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InTapHandle(g.tap), grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream)}
}

// ServerOptionsFor are the credentials of a server holding c (TLS 1.3, a
// client certificate required and verified in the handshake) whose failed
// handshakes the guard refuses and reports, then the tap and interceptors.
func (g *Guard) ServerOptionsFor(c *Credentials) []grpc.ServerOption {
	creds := &handshakeGuard{TransportCredentials: credentials.NewTLS(c.ServerTLS()), g: g}
	return append([]grpc.ServerOption{grpc.Creds(creds)}, g.ServerOptions()...)
}

// HandshakeMethod is the method a refused TLS handshake is reported under
// (no call was made: the peer had no valid certificate, or did not finish
// the handshake in time).
const HandshakeMethod = "tls-handshake"

// handshakeGuard reports the server handshakes that fail.
type handshakeGuard struct {
	credentials.TransportCredentials
	g *Guard
}

func (h *handshakeGuard) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, ai, err := h.TransportCredentials.ServerHandshake(conn)
	// A peer that closes before saying anything (a port probe, a client
	// giving up) is no refusal.
	if err != nil && !errors.Is(err, io.EOF) {
		var addr string
		if a := conn.RemoteAddr(); a != nil {
			addr = a.String()
		}
		h.g.refuseAddr(addr, Identity{}, HandshakeMethod, codes.Unauthenticated, err)
	}
	return c, ai, err
}

func (h *handshakeGuard) Clone() credentials.TransportCredentials {
	return &handshakeGuard{TransportCredentials: h.TransportCredentials.Clone(), g: h.g}
}

const healthPrefix = "/grpc.health.v1.Health/"

// refuse refuses a call. From the tap it runs under the lock of the
// caller's own connection (grpc's transport): a report (rate limited) makes
// only that connection wait.
func (g *Guard) refuse(ctx context.Context, id Identity, method string, code codes.Code, why error) error {
	var addr string
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	g.refuseAddr(addr, id, method, code, why)
	return status.Error(code, why.Error())
}

// refuseAddr counts a refusal and reports it, rate limited.
func (g *Guard) refuseAddr(addr string, id Identity, method string, code codes.Code, why error) {
	if int(code) < len(g.refused) {
		g.refused[code].Add(1)
	}
	if g.count != nil {
		g.count(method, code)
	}
	if g.report != nil {
		r := Refusal{Time: g.now(), Addr: addr, ID: id, Method: method, Code: code, Reason: why.Error()}
		host := r.Addr
		if h, _, err := net.SplitHostPort(r.Addr); err == nil {
			host = h
		}
		key := host + " " + id.String() + " " + method
		g.mu.Lock()
		last, seen := g.last[key]
		allow := (!seen || r.Time.Sub(last) >= g.every) && g.limiter.AllowN(r.Time, 1)
		if allow {
			if len(g.last) >= 1<<14 {
				clear(g.last) // bounded: at worst some repeats are reported again
			}
			g.last[key] = r.Time
		}
		if allow {
			r.Suppressed, g.suppressed = g.suppressed, 0
		} else {
			g.suppressed++
		}
		g.mu.Unlock()
		if allow {
			g.report(r)
		}
	}
}

// check authorizes the start of a call: a verified certificate, and the
// policy for its method (health: any certificate).
func (g *Guard) check(ctx context.Context, method string) (Identity, error) {
	p, _ := peer.FromContext(ctx)
	id, err := Peer(p)
	if err != nil {
		return Identity{}, g.refuse(ctx, Identity{}, method, codes.Unauthenticated, fmt.Errorf("%s needs a kelpie client certificate", method))
	}
	if strings.HasPrefix(method, healthPrefix) {
		return id, nil
	}
	if err := g.policy(id, method, nil); err != nil {
		return id, g.refuse(ctx, id, method, codes.PermissionDenied, err)
	}
	return id, nil
}

// tap refuses a stream whose caller may not call its method as soon as
// its headers arrive: grpc then resets it without reading its body or
// starting a handler.
func (g *Guard) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if _, err := g.check(ctx, info.FullMethodName); err != nil {
		return ctx, err
	}
	return ctx, nil
}

func (g *Guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	id, err := g.check(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	if m, ok := req.(proto.Message); ok && !strings.HasPrefix(info.FullMethod, healthPrefix) {
		if err := g.policy(id, info.FullMethod, m); err != nil {
			return nil, g.refuse(ctx, id, info.FullMethod, codes.PermissionDenied, err)
		}
	}
	return h(ctx, req)
}

func (g *Guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	id, err := g.check(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if strings.HasPrefix(info.FullMethod, healthPrefix) {
		return h(srv, ss)
	}
	return h(srv, &guardedStream{ServerStream: ss, g: g, id: id, method: info.FullMethod})
}

// guardedStream checks every message the client sends.
type guardedStream struct {
	grpc.ServerStream
	g      *Guard
	id     Identity
	method string
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if pm, ok := m.(proto.Message); ok {
		if err := s.g.policy(s.id, s.method, pm); err != nil {
			return s.g.refuse(s.Context(), s.id, s.method, codes.PermissionDenied, err)
		}
	}
	return nil
}

// Claims checks that msg names no job, node or role but id's: every string
// field named job or node and every Role field named role, in msg and in
// the messages it holds directly, must be empty or id's.
func Claims(id Identity, msg proto.Message) error {
	return claims(id, msg.ProtoReflect(), 2)
}

func claims(id Identity, m protoreflect.Message, depth int) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() || fd.IsMap():
		case fd.Kind() == protoreflect.StringKind && fd.Name() == "job":
			if s := v.String(); s != "" && s != id.Job {
				err = fmt.Errorf("%s may not act in job %q", id, s)
			}
		case fd.Kind() == protoreflect.StringKind && fd.Name() == "node":
			if s := v.String(); s != "" && s != id.Node {
				err = fmt.Errorf("%s may not act as node %q", id, s)
			}
		case fd.Kind() == protoreflect.EnumKind && fd.Name() == "role" && fd.Enum().FullName() == "kelpie.v1.Role":
			if r := coordinatorpb.Role(v.Enum()); r != coordinatorpb.Role_ROLE_UNSPECIFIED && roleName(r) != id.Role {
				err = fmt.Errorf("%s may not act as a %s", id, roleName(r))
			}
		case fd.Kind() == protoreflect.MessageKind && depth > 1:
			err = claims(id, v.Message(), depth-1)
		}
		return err == nil
	})
	return err
}

func roleName(r coordinatorpb.Role) string {
	switch r {
	case coordinatorpb.Role_ROLE_SERVER:
		return RoleServer
	case coordinatorpb.Role_ROLE_WORKER:
		return RoleWorker
	}
	return r.String()
}

// Service method prefixes.
const (
	coordinatorPrefix = "/kelpie.v1.Coordinator/"
	agentPrefix       = "/kelpie.v1.Agent/"
	psPrefix          = "/kelpie.v1.ParameterServer/"
	agentPeerPrefix   = "/kelpie.v1.AgentPeer/"
	reflectionPrefix  = "/grpc.reflection."
)

// SchedulerPolicy guards the scheduler's node plane: nodes register,
// report, fetch and report shards and hold their agent stream only as
// themselves, in their own job; shards, Done and Result are workers'.
// Reflection answers any certificate holder (operators' grpcurl).
func SchedulerPolicy(id Identity, method string, msg proto.Message) error {
	switch {
	case strings.HasPrefix(method, reflectionPrefix):
		return nil
	case strings.HasPrefix(method, coordinatorPrefix), strings.HasPrefix(method, agentPrefix):
	default:
		return fmt.Errorf("%s is not served to %s", method, id)
	}
	if !isNode(id) {
		return fmt.Errorf("%s: only a job's nodes may call it, not %s", method, id)
	}
	switch strings.TrimPrefix(method, coordinatorPrefix) {
	case "FetchShard", "ReportShard", "Done", "Result":
		if id.Role != RoleWorker {
			return fmt.Errorf("%s: only workers may call it, not %s", method, id)
		}
	}
	if msg == nil {
		return nil
	}
	if d, ok := msg.(*coordinatorpb.DivergedRequest); ok {
		// The divergence's node is where it was seen (a server's answer
		// says it diverged), not who reports it: the reporter is judged by
		// the request's own job and node, and the coordinator checks that
		// the node it names is a member of the job.
		return claims(id, d.ProtoReflect(), 1)
	}
	return Claims(id, msg)
}

// ServerPolicy guards a parameter server of the job self belongs to: only
// the job's workers push and pull (each as itself), only the job's servers
// migrate blocks to it, only the scheduler calls its control RPCs; Stats
// answers the scheduler and the job's nodes, Probe the job's workers.
func ServerPolicy(self Identity) Policy {
	return func(id Identity, method string, msg proto.Message) error {
		if strings.HasPrefix(method, reflectionPrefix) {
			return nil
		}
		if !strings.HasPrefix(method, psPrefix) {
			return fmt.Errorf("%s is not served to %s", method, id)
		}
		if err := SameInstance(self, id); err != nil {
			return err
		}
		sameJob := id.Job == self.Job && id.Job != ""
		switch name := strings.TrimPrefix(method, psPrefix); name {
		case "Exchange", "Push", "Pull":
			if id.Role != RoleWorker || !sameJob {
				return fmt.Errorf("%s: only workers of job %s may push and pull, not %s", name, self.Job, id)
			}
			if r, ok := msg.(*pspb.PSRequest); ok {
				if want, _ := strconv.Atoi(strings.TrimPrefix(id.Node, "worker-")); int(r.GetWorker()) != want {
					return fmt.Errorf("%s: %s may not act as worker %d", name, id, r.GetWorker())
				}
			}
		case "Migrate":
			if id.Role != RoleServer || !sameJob {
				return fmt.Errorf("%s: only servers of job %s may migrate blocks, not %s", name, self.Job, id)
			}
		case "Probe":
			if id.Role != RoleWorker || !sameJob {
				return fmt.Errorf("%s: only workers of job %s may probe it, not %s", name, self.Job, id)
			}
		case "Stats":
			if id.Role != RoleScheduler && !sameJob {
				return fmt.Errorf("%s: not for %s", name, id)
			}
		default: // Retable, Checkpoint, SetSync, Shutdown and any later control RPC
			if id.Role != RoleScheduler {
				return fmt.Errorf("%s: only the scheduler may call it, not %s", name, id)
			}
		}
		return nil
	}
}

// AgentPeerPolicy guards the peer service of the agent of node self (a
// primary agent forwards a global action to the others): only a node of
// self's own job may call it, as itself (Claims: the request's job and
// node are the caller's).
func AgentPeerPolicy(self Identity) Policy {
	return func(id Identity, method string, msg proto.Message) error {
		if !strings.HasPrefix(method, agentPeerPrefix) {
			return fmt.Errorf("%s is not served to %s", method, id)
		}
		if !isNode(id) || id.Job == "" || id.Job != self.Job {
			return fmt.Errorf("%s: only the agents of job %s may call it, not %s", method, self.Job, id)
		}
		if err := SameInstance(self, id); err != nil {
			return err
		}
		if msg == nil {
			return nil
		}
		return Claims(id, msg)
	}
}

// isNode says whether id is a job's node (a worker or a server).
func isNode(id Identity) bool { return id.Role == RoleWorker || id.Role == RoleServer }

// NodeOf accepts exactly one node of one job (for an agent dialling the
// peer service of another agent of its job).
func NodeOf(job, node string) func(Identity) error {
	return func(id Identity) error {
		if id.Job != job || id.Node != node || !isNode(id) {
			return fmt.Errorf("identity: %s is not node %s of job %s", id, node, job)
		}
		return nil
	}
}

// Proto is the refusal as a node's agent forwards it to the scheduler.
func (r Refusal) Proto() *agentpb.NodeRefusal {
	m := &agentpb.NodeRefusal{UnixNano: r.Time.UnixNano(), Addr: r.Addr, CallerJob: r.ID.Job, Method: r.Method,
		Code: r.Code.String(), Reason: r.Reason, Suppressed: r.Suppressed}
	if r.ID.Role != "" {
		m.Caller = r.ID.String()
	}
	return m
}
