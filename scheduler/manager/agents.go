package manager

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/scheduler/clock"
	"github.com/kelpie/kelpie/scheduler/launch"
	"github.com/kelpie/kelpie/scheduler/store"
)

// agentConn is the sending side of one agent's stream. A single goroutine
// sends; send never blocks the manager (a full queue drops the message and
// the agent's reconnect replays what matters).
type agentConn struct {
	out  chan *agentpb.SchedulerMessage
	done chan struct{}
	once sync.Once

	// The sender is a goroutine only while messages wait: the message
	// that finds none running starts one, and it ends once the queue is
	// empty. Agents are sent little (commands, stops), and 20,000 idle
	// senders, one per stream, held a quarter of a 20,000-agent
	// scheduler's goroutine stacks (220 MB of them, 55 MB less without).
	mu      sync.Mutex                  // guards stream, ctx and sending
	stream  agentpb.Agent_ConnectServer // nil until Connect serves it (tests read out themselves)
	ctx     context.Context             // the stream's
	sending bool                        // a sender runs, or the stream is done with
	sendErr chan error                  // the failed send, for Connect's receive loop
}

// send queues m for the agent; false when the queue is full or the stream
// ended.
func (c *agentConn) send(m *agentpb.SchedulerMessage) bool {
	select {
	case c.out <- m:
	case <-c.done:
		return false
	default:
		return false
	}
	c.startSender()
	return true
}

// serve makes stream the connection's: the messages queued before and
// after go out on it; a failed send is put in sendErr (one slot).
func (c *agentConn) serve(stream agentpb.Agent_ConnectServer, sendErr chan error) {
	c.mu.Lock()
	c.stream, c.ctx, c.sendErr = stream, stream.Context(), sendErr
	c.mu.Unlock()
	c.startSender()
}

// startSender starts the sender unless one runs or the stream is not
// served yet.
func (c *agentConn) startSender() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sending || c.stream == nil || c.closed() {
		return
	}
	c.sending = true
	go c.sendQueued(c.stream, c.ctx)
}

// sendQueued sends the queued messages in order until the queue is empty,
// the stream ends or a send fails (then no sender starts again).
func (c *agentConn) sendQueued(stream agentpb.Agent_ConnectServer, ctx context.Context) {
	for {
		if c.closed() || ctx.Err() != nil {
			return // nothing is sent once Connect is done with the stream
		}
		select {
		case msg := <-c.out:
			if err := stream.Send(msg); err != nil {
				c.sendErr <- err
				return
			}
			continue
		case <-c.done:
			return
		case <-ctx.Done():
			return
		default:
		}
		c.mu.Lock()
		if len(c.out) == 0 {
			c.sending = false // a message queued from now on starts a sender
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

func (c *agentConn) close() { c.once.Do(func() { close(c.done) }) }

// closed says whether close was called.
func (c *agentConn) closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// AgentService serves the Agent gRPC service for the manager's jobs.
type AgentService struct {
	agentpb.UnimplementedAgentServer
	m *Manager
}

// Agents is the manager's Agent service.
func (m *Manager) Agents() *AgentService { return &AgentService{m: m} }

// Connect serves one agent's stream.
func (s *AgentService) Connect(stream agentpb.Agent_ConnectServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "agent stream must start with hello")
	}
	cleanHello(hello)
	m := s.m
	j, ok := m.lookup(hello.Job)
	if !ok {
		return status.Errorf(codes.NotFound, "no node %s in job %s", hello.Node, hello.Job)
	}
	// The node's connection is the actor's to change (actor.go); the
	// answers to a refused agent are sent from here.
	var (
		n      *nodeState
		conn   *agentConn
		replay []*agentpb.ActionCommand
		stop   string
	)
	// The agent as this host sees it (read off the actor): how a replica
	// that did not launch it learns later that it died (adopt.go).
	var seenAgent *launch.Record
	if r, ok := launch.Observed(hello.Node, int(hello.AgentPid)); ok {
		seenAgent = &r
	}
	j.onActor(func() {
		n = j.nodes[hello.Node]
		switch {
		case n == nil:
			return
		case j.over():
			stop = "job " + j.state // tell a straggling agent to stop
			return
		case n.replaced(hello.AgentPid):
			m.event(j.spec.Name, "node", n.name, fmt.Sprintf("old agent of %s (pid %d) came back after its relaunch: stopped", n.name, hello.AgentPid), "")
			stop = "replaced by a relaunched agent"
			return
		}
		conn = &agentConn{out: make(chan *agentpb.SchedulerMessage, 64), done: make(chan struct{})}
		if n.conn != nil {
			n.conn.close()
		}
		n.conn = conn
		n.seenAgent = seenAgent
		n.host = hello.Host
		n.peerAddr = hello.PeerAddr
		n.lastSeen = m.now()
		j.wakeWaiters()
		applied := map[string]bool{}
		for _, id := range hello.AppliedActions {
			applied[id] = true
		}
		// Replay actions dispatched to this node that it has not taken.
		for _, a := range j.actions {
			if a.State == "dispatched" && !applied[a.Id] && j.targets(a, hello.Node) {
				replay = append(replay, j.command(a, hello.Node))
			}
		}
		// A server's commands still waiting for its ack (the agent answers
		// one it took already with the same ack).
		replay = append(replay, j.pendingCalls(hello.Node)...)
		m.event(j.spec.Name, "node", hello.Node, fmt.Sprintf("agent of %s connected from %s (pid %d)", hello.Node, hello.Host, hello.AgentPid), "")
	})
	switch {
	case n == nil:
		return status.Errorf(codes.NotFound, "no node %s in job %s", hello.Node, hello.Job)
	case stop != "":
		_ = stream.Send(&agentpb.SchedulerMessage{Body: &agentpb.SchedulerMessage_Stop{Stop: stop}})
		return nil
	}
	for _, c := range replay {
		conn.send(&agentpb.SchedulerMessage{Body: &agentpb.SchedulerMessage_Command{Command: c}})
	}

	sendErr := make(chan error, 1)
	conn.serve(stream, sendErr)
	defer func() {
		j.onActor(func() {
			if n.conn == conn {
				n.conn = nil
			}
		})
		conn.close()
	}()
	for {
		msg, err := stream.Recv()
		if err != nil {
			return nil
		}
		cleanAgentMessage(msg)
		select {
		case err := <-sendErr:
			return err
		default:
		}
		if s := msg.GetStacks(); s != nil {
			m.stacksReply(n.name, s) // kelpie job stacks (stacks.go)
			continue
		}
		if p := msg.GetProbe(); p != nil {
			m.probeReply(n.name, p) // kelpie job probe (probe.go)
			continue
		}
		if hb := msg.GetHeartbeat(); hb != nil {
			// A heartbeat may write the node's state to the store: taken
			// in here, so that the job's reports never queue behind a
			// disk write.
			t0 := m.clk.Now()
			m.streamHeartbeat(j, n, hb)
			ingest.Observe(clock.Since(m.clk, t0).Seconds())
			continue
		}
		// Reports, acks, server counters and refusals: taken in by the
		// job's actor, in order (actor.go); the ingest time counts the
		// wait for it.
		j.post(n, msg)
	}
}

// ingest is how long the scheduler takes to take in one agent message,
// from its arrival to the end of its handling by the job's actor.
var ingest = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name:    "kelpie_agent_ingest_seconds",
	Help:    "Time to take in one agent message (report, heartbeat or ack), from its arrival to the end of its handling by the job's actor.",
	Buckets: prometheus.ExponentialBuckets(1e-6, 2, 24),
})

// IngestHistogram is the scheduler's ingest-time histogram, for /metrics.
func IngestHistogram() prometheus.Collector { return ingest }

// fromAgent handles one message of an agent, on the job's actor (a
// heartbeat only in tests: the streams take those in themselves, so that
// its store write is not the actor's).
func (m *Manager) fromAgent(j *jobState, n *nodeState, msg *agentpb.AgentMessage) {
	now := m.now()
	switch b := msg.Body.(type) {
	case *agentpb.AgentMessage_Report:
		m.report(j, n.name, b.Report)
	case *agentpb.AgentMessage_Heartbeat:
		m.heartbeatChanged(j, n, b.Heartbeat, m.takeHeartbeat(j, n, b.Heartbeat, now))
	case *agentpb.AgentMessage_Ack:
		m.acked(j, n.name, b.Ack)
	case *agentpb.AgentMessage_Forwarded:
		m.forwarded(j, n.name, b.Forwarded)
	case *agentpb.AgentMessage_Refusal:
		if m.cfg.NodeRefusal != nil {
			m.cfg.NodeRefusal(j.spec.Name, n.name, b.Refusal)
		}
	case *agentpb.AgentMessage_ServerStats:
		if n.role == "server" {
			n.stats, n.statsAt = b.ServerStats, now
			n.cause.addStats(b.ServerStats)
			j.wakeWaiters()
		}
	}
}

// heartbeatChange is what a heartbeat changed of its node (changed: its
// state), for its event and the store's record.
type heartbeatChange struct {
	changed        bool
	prev           agentpb.NodeState
	restartsBefore int32
	removed        bool
	host           string
	batch          int
}

// takeHeartbeat takes in an agent's heartbeat, on the job's actor. Most
// say what the last one said: they only mark the node as heard of.
func (m *Manager) takeHeartbeat(j *jobState, n *nodeState, hb *agentpb.Heartbeat, now time.Time) heartbeatChange {
	st := hb.GetStatus()
	if n.status.State == st.GetState() && n.status.Pid == lastPid(st, n.status.Pid) &&
		n.status.Restarts == st.GetRestarts() && n.status.LastExit == st.GetLastExit() {
		n.heardAt(now)
		return heartbeatChange{}
	}
	ch := heartbeatChange{prev: n.status.State, restartsBefore: n.status.Restarts}
	n.status = agentpb.NodeStatus{State: st.State, Pid: lastPid(st, n.status.Pid), Restarts: st.Restarts, LastExit: st.LastExit}
	n.lastSeen = now
	ch.removed, ch.host, ch.batch = n.removed, n.host, n.prog.batch
	ch.changed = ch.prev != st.State
	return ch
}

// streamHeartbeat takes in a heartbeat on its agent's stream: on the
// job's actor, then its event and store record (if it changed the node's
// state) on the stream.
func (m *Manager) streamHeartbeat(j *jobState, n *nodeState, hb *agentpb.Heartbeat) {
	var ch heartbeatChange
	j.onActor(func() { ch = m.takeHeartbeat(j, n, hb, m.now()) })
	m.heartbeatChanged(j, n, hb, ch)
}

// heartbeatChanged writes the event and the store's record of a
// heartbeat that changed its node's state (ch), off the actor.
func (m *Manager) heartbeatChanged(j *jobState, n *nodeState, hb *agentpb.Heartbeat, ch heartbeatChange) {
	if !ch.changed {
		return
	}
	st := hb.GetStatus()
	msg := fmt.Sprintf("%s %s", n.name, stateName(st.State))
	if st.Restarts > ch.restartsBefore && st.LastExit != "" {
		msg += " (" + st.LastExit + ")"
	}
	if st.State == agentpb.NodeState_NODE_STATE_RUNNING && st.Pid != 0 {
		msg += fmt.Sprintf(", pid %d", st.Pid)
	}
	m.event(j.spec.Name, "node", n.name, msg, "")
	state := stateName(st.State)
	if ch.removed {
		state = nodeRemoved
	}
	_ = m.cfg.Store.PutNode(j.spec.Name, store.NodeRecord{Name: n.name, Role: n.role, Host: ch.host,
		Pid: int(st.Pid), State: state, Restarts: int(st.Restarts), BatchSize: ch.batch})
}

// lastPid is the pid a node shows given its agent's status st and the pid
// it showed (prev): the status's, except that a node whose process has
// ended (done, stopped, failed, lost) keeps the pid it last ran as when
// the status has none (agents send some final states without it). A
// starting or restarting node has no process yet: 0.
func lastPid(st *agentpb.NodeStatus, prev int32) int32 {
	switch st.GetState() {
	case agentpb.NodeState_NODE_STATE_DONE, agentpb.NodeState_NODE_STATE_STOPPED,
		agentpb.NodeState_NODE_STATE_FAILED, agentpb.NodeState_NODE_STATE_LOST:
		if st.GetPid() == 0 {
			return prev
		}
	}
	return st.GetPid()
}

func stateName(s agentpb.NodeState) string {
	switch s {
	case agentpb.NodeState_NODE_STATE_STARTING:
		return "starting"
	case agentpb.NodeState_NODE_STATE_RUNNING:
		return "running"
	case agentpb.NodeState_NODE_STATE_RESTARTING:
		return "restarting"
	case agentpb.NodeState_NODE_STATE_DONE:
		return "done"
	case agentpb.NodeState_NODE_STATE_FAILED:
		return "failed"
	case agentpb.NodeState_NODE_STATE_LOST:
		return "lost"
	case agentpb.NodeState_NODE_STATE_STOPPED:
		return "stopped"
	}
	return "unknown"
}

// nodeStateIn is the state a node shows in a job in state job. Once the job
// is over, a node whose agent last said it was starting, running or
// restarting (it stopped with the job and never said so, or its agent had
// gone) shows done in a completed job and stopped in any other: a finished
// job has no running nodes.
func nodeStateIn(job, node string) string {
	switch job {
	case StateCompleted, StateFailed, StateKilled, StateDiverged:
	default:
		return node
	}
	switch node {
	case "starting", "running", "restarting", "unknown":
		if job == StateCompleted {
			return "done"
		}
		return "stopped"
	}
	return node
}
