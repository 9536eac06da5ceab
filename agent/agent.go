// Package agent is kelpie's per-node agent: it starts the node's role (a
// parameter server or a worker) as a child process and supervises it —
// restart with backoff after a crash, kill and restart on a KILL_RESTART
// action — forwards the role's telemetry from a local channel (two pipes)
// to the scheduler over one gRPC stream, heartbeats, and hands actions to
// the role to apply at an iteration boundary.
//
// Each action is applied at most once: the agent remembers the ids it has
// taken, tells the scheduler on every (re)connect, and ignores replays.
//
// A global action (a batch split, learning-rate scales, a new block table
// for the workers) comes from the scheduler to one agent only, the primary
// (AntDT Fig. 6): the agent serves the other agents of its job a peer
// service (AgentPeer, peer.go) and the primary forwards the command to
// each secondary over it, then tells the scheduler whom it could not reach
// so that the scheduler sends those the command itself. Every agent applies
// the action at its target iteration and acks it on its own stream.
package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/core/replicas"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

// Options configure an agent.
type Options struct {
	Scheduler string // the scheduler's gRPC address (Agent and Coordinator services); replicas' comma-separated
	Job       string
	Node      string
	Role      coordinatorpb.Role
	// Host is the host name reported to the scheduler (default: the
	// machine's). When given, it is handed to the role too: with
	// cluster.spare_hosts it names the simulated host the node runs on,
	// whose injections the role carries (runtime/role Options.Host).
	Host string
	// Relaunched says the scheduler launched this agent to relaunch its
	// node by a KILL_RESTART (on another host): its role starts as a
	// relaunched one (the process's own injections are gone).
	Relaunched bool
	Exe        string        // the kelpie binary for the role (default: this executable)
	Out        io.Writer     // the role's output (default stderr)
	Log        *slog.Logger  // the agent's own log
	Heartbeat  time.Duration // default 1s
	// Backoff between restarts after crashes: Initial doubling up to Max,
	// with jitter; reset after a run of StableAfter.
	Backoff Backoff
	// SnapshotDir is handed to a server role: its snapshots live there.
	SnapshotDir string
	// Listen is handed to a server role: the address its data plane
	// listens on and registers (in a Pod, $(POD_IP):0).
	Listen string
	// MaxRestarts is how many consecutive crashes the agent restarts
	// before it gives up (default 10).
	MaxRestarts int
	// PeerListen is where the agent's peer service listens (default: the
	// host of Listen, else 127.0.0.1, port 0); the address is told to the
	// scheduler, which hands it to primaries. "off": no peer service (the
	// scheduler then sends this agent every command itself).
	PeerListen string
	// PeerTimeout bounds a primary's call to one secondary (default 5s).
	PeerTimeout time.Duration
	// Credentials are the node's (nil: $KELPIE_CERT, identity.Process; none
	// there: a plaintext node plane).
	Credentials *identity.Credentials
	// OrphanTimeout is how long the agent keeps its role running without
	// a scheduler (restarting, unreachable) before it stops the role and
	// exits, so that nothing is left running forever (default
	// DefaultOrphanTimeout). The role retries its own calls for as long.
	OrphanTimeout time.Duration
}

// DefaultOrphanTimeout is the default of Options.OrphanTimeout.
const DefaultOrphanTimeout = 10 * time.Minute

// ReconnectParams are the connection backoff of clients of the scheduler
// (agents', roles'): gRPC's default grows to 2 minutes, so a channel that
// failed through a long scheduler outage would find the scheduler back
// only minutes later; capped at 3 s it is back within seconds.
var ReconnectParams = grpc.ConnectParams{
	Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// Backoff is an exponential backoff with jitter.
type Backoff struct {
	Initial, Max, StableAfter time.Duration
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 200 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 5 * time.Second
	}
	if b.StableAfter <= 0 {
		b.StableAfter = 30 * time.Second
	}
	return b
}

// Delay is the wait before restart number n (1-based) of a crash run.
func (b Backoff) Delay(n int, jitter float64) time.Duration {
	b = b.withDefaults()
	d := b.Initial
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return time.Duration(float64(d) * (0.8 + 0.4*jitter))
}

// Agent supervises one node.
type Agent struct {
	o   Options
	log *slog.Logger
	// roleHost is the host handed to the role: Options.Host as given
	// (empty: the machine's, which the role need not know).
	roleHost string

	outbox chan *agentpb.AgentMessage // to the scheduler; reports may be dropped when full, acks never
	// closing is closed once the role has ended for good: the stream
	// sends what is queued, closes its sending side and ends when the
	// scheduler has read it all (session).
	closing chan struct{}

	mu       sync.Mutex
	status   agentpb.NodeStatus
	taken    map[string]*agentpb.ActionAck     // action id -> its ack (nil until the role answers)
	toChild  io.Writer                         // the command pipe of the running role, nil when none
	queued   []*agentpb.ActionCommand          // actions that came while the role was not running
	unacked  map[string]*agentpb.ActionCommand // actions handed to a role that has not answered yet
	child    *exec.Cmd
	restarts chan string // KILL_RESTART action ids
	stop     chan string // the scheduler's stop, with the reason
	// contact is when the agent last had a stream to the scheduler (its
	// start before the first); connected while it has one.
	contact   time.Time
	connected bool

	// forwards are the global actions this agent is the primary of, for
	// its forwarding loop (peer.go); peerAddr is where its peer service
	// listens ("" without one), set before the first connection.
	forwards chan *agentpb.ActionCommand
	peerAddr string

	// stackWait: the stacks requests waiting for the role's answer, by id
	// (stacks.go); under mu.
	stackWait map[string]chan *agentpb.StacksReply
	// probeWait: the probes waiting for the role's answer, by id
	// (probe.go); under mu.
	probeWait map[string]chan *agentpb.ProbeReply
}

// New makes an agent.
func New(o Options) *Agent {
	if o.Heartbeat <= 0 {
		o.Heartbeat = time.Second
	}
	if o.MaxRestarts <= 0 {
		o.MaxRestarts = 10
	}
	if o.OrphanTimeout <= 0 {
		o.OrphanTimeout = DefaultOrphanTimeout
	}
	if o.PeerTimeout <= 0 {
		o.PeerTimeout = 5 * time.Second
	}
	if o.Out == nil {
		o.Out = os.Stderr
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	roleHost := o.Host
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	return &Agent{o: o, roleHost: roleHost, log: o.Log.With("agent", o.Node), outbox: make(chan *agentpb.AgentMessage, 256), closing: make(chan struct{}),
		taken: map[string]*agentpb.ActionAck{}, unacked: map[string]*agentpb.ActionCommand{},
		restarts: make(chan string, 4), stop: make(chan string, 1), contact: time.Now(),
		forwards: make(chan *agentpb.ActionCommand, 64)}
}

// credentials are the node's: Options.Credentials, else $KELPIE_CERT (nil
// without it: plaintext).
func (a *Agent) credentials() (*identity.Credentials, error) {
	if a.o.Credentials != nil {
		return a.o.Credentials, nil
	}
	return identity.Process()
}

// Run supervises the role until it is done, the scheduler stops the job, the
// role fails for good, or ctx ends. It returns nil when the role finished
// its work or was stopped on purpose.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	// The peer service first: its address goes in the hello.
	stopPeers := a.startPeers(&wg)
	wg.Add(2)
	connected := make(chan struct{})
	go func() { defer wg.Done(); a.forwardLoop(ctx) }()
	go func() { defer wg.Done(); defer close(connected); a.connectLoop(ctx) }()
	err := a.supervise(ctx)
	// The role's last state (and a server's final counters) must reach
	// the scheduler: the stream ends once it has read them, or after
	// flushTimeout if it cannot (the scheduler is away).
	close(a.closing)
	select {
	case <-connected:
	case <-time.After(flushTimeout):
	}
	cancel()
	stopPeers()
	wg.Wait()
	return err
}

func (a *Agent) setState(s agentpb.NodeState, pid int, lastExit string) {
	a.mu.Lock()
	a.status.State = s
	a.status.Pid = int32(pid)
	if lastExit != "" {
		a.status.LastExit = lastExit
	}
	st := proto(&a.status)
	a.mu.Unlock()
	a.enqueue(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{Status: st}}}, true)
}

func proto(s *agentpb.NodeStatus) *agentpb.NodeStatus {
	return &agentpb.NodeStatus{State: s.State, Pid: s.Pid, Restarts: s.Restarts, LastExit: s.LastExit}
}

// enqueue queues a message for the scheduler. Must-deliver messages wait for
// room; telemetry is dropped when the queue is full (the scheduler is away).
func (a *Agent) enqueue(m *agentpb.AgentMessage, must bool) {
	if must {
		select {
		case a.outbox <- m:
		case <-time.After(5 * time.Second):
			a.log.Warn("scheduler unreachable: dropping a state message")
		}
		return
	}
	select {
	case a.outbox <- m:
	default:
	}
}

// flushTimeout bounds how long an agent whose role has ended waits for
// the scheduler to read its last messages.
const flushTimeout = 3 * time.Second

// closed says whether the role has ended for good (closing).
func (a *Agent) closed() bool {
	select {
	case <-a.closing:
		return true
	default:
		return false
	}
}

// supervise runs the role process, restarting it as needed.
func (a *Agent) supervise(ctx context.Context) error {
	crashes := 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	relaunched := a.o.Relaunched
	for {
		a.setState(agentpb.NodeState_NODE_STATE_STARTING, 0, "")
		started := time.Now()
		cmd, exited, err := a.startRole(relaunched)
		if err != nil {
			a.setState(agentpb.NodeState_NODE_STATE_FAILED, 0, err.Error())
			return err
		}
		a.setState(agentpb.NodeState_NODE_STATE_RUNNING, cmd.Process.Pid, "")
		restartID := ""
		var why string
		select {
		case err = <-exited:
		case restartID = <-a.restarts:
			_ = cmd.Process.Signal(syscall.SIGKILL)
			err = <-exited
		case why = <-a.stop:
			_ = a.stopChild(cmd, exited)
			a.setState(agentpb.NodeState_NODE_STATE_STOPPED, 0, "stopped: "+why)
			return nil
		case <-ctx.Done():
			a.stopChild(cmd, exited)
			a.setState(agentpb.NodeState_NODE_STATE_STOPPED, 0, "agent stopped")
			return ctx.Err()
		}
		a.detachChild()
		exit := describeExit(err)
		if restartID != "" {
			a.bumpRestarts()
			a.log.Info("restarting the role on request", "action", restartID, "exit", exit)
			a.acked(&agentpb.ActionAck{ActionId: restartID, Applied: true})
			a.setState(agentpb.NodeState_NODE_STATE_RESTARTING, 0, exit)
			crashes = 0
			relaunched = true
			continue
		}
		if err == nil {
			// The role finished its work: actions it never took no longer
			// apply to it.
			a.settlePending("the role had finished")
			a.setState(agentpb.NodeState_NODE_STATE_DONE, 0, exit)
			return nil
		}
		if time.Since(started) >= a.o.Backoff.withDefaults().StableAfter {
			crashes = 0
		}
		crashes++
		if crashes > a.o.MaxRestarts {
			a.setState(agentpb.NodeState_NODE_STATE_FAILED, 0, exit)
			return fmt.Errorf("agent %s: role crashed %d times in a row, last: %s", a.o.Node, crashes, exit)
		}
		delay := a.o.Backoff.Delay(crashes, rng.Float64())
		a.bumpRestarts()
		a.setState(agentpb.NodeState_NODE_STATE_RESTARTING, 0, exit)
		a.log.Warn("role exited; restarting", "exit", exit, "in", delay.Round(time.Millisecond), "attempt", crashes)
		select {
		case <-time.After(delay):
		case why = <-a.stop:
			a.setState(agentpb.NodeState_NODE_STATE_STOPPED, 0, "stopped: "+why)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (a *Agent) bumpRestarts() {
	a.mu.Lock()
	a.status.Restarts++
	a.mu.Unlock()
}

func describeExit(err error) string {
	if err == nil {
		return "exited with status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			// "killed by signal 9 (killed)": Signal's String alone reads
			// "killed by killed" for SIGKILL.
			return fmt.Sprintf("killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
		}
		return fmt.Sprintf("exited with status %d", ee.ExitCode())
	}
	return err.Error()
}

// stopChild ends the role: SIGTERM, then SIGKILL after a grace period.
func (a *Agent) stopChild(cmd *exec.Cmd, exited <-chan error) error {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		return err
	case <-time.After(3 * time.Second):
		_ = cmd.Process.Kill()
		return <-exited
	}
}

func (a *Agent) detachChild() {
	a.mu.Lock()
	a.toChild, a.child = nil, nil
	a.mu.Unlock()
}

// startRole starts `kelpie role ROLE` with the local channel on fds 3 and 4.
func (a *Agent) startRole(relaunched bool) (*exec.Cmd, <-chan error, error) {
	exe := a.o.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, nil, err
		}
	}
	roleName := "worker"
	if a.o.Role == coordinatorpb.Role_ROLE_SERVER {
		roleName = "server"
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		repR.Close()
		repW.Close()
		return nil, nil, err
	}
	args := []string{"role", roleName, "--coordinator", a.o.Scheduler, "--job", a.o.Job, "--node", a.o.Node,
		"--report-fd", "3", "--command-fd", "4", "--retry-for", a.o.OrphanTimeout.String()}
	if relaunched {
		args = append(args, "--relaunched")
	}
	if a.roleHost != "" {
		args = append(args, "--host", a.roleHost)
	}
	if a.o.SnapshotDir != "" && a.o.Role == coordinatorpb.Role_ROLE_SERVER {
		args = append(args, "--snapshot-dir", a.o.SnapshotDir)
	}
	if a.o.Listen != "" && a.o.Role == coordinatorpb.Role_ROLE_SERVER {
		args = append(args, "--listen", a.o.Listen)
	}
	cmd := exec.Command(exe, args...)
	cmd.ExtraFiles = []*os.File{repW, cmdR}
	cmd.Stdout, cmd.Stderr = a.o.Out, a.o.Out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{repR, repW, cmdR, cmdW} {
			f.Close()
		}
		return nil, nil, fmt.Errorf("agent %s: start role: %v", a.o.Node, err)
	}
	repW.Close()
	cmdR.Close()
	a.mu.Lock()
	a.toChild, a.child = cmdW, cmd
	// Actions the previous run of the role took but never answered (it
	// died first) go to this run, then those that came in between.
	for _, c := range a.unacked {
		a.queued = append([]*agentpb.ActionCommand{c}, a.queued...)
	}
	a.unacked = map[string]*agentpb.ActionCommand{}
	for _, c := range a.queued {
		if _, err := protodelim.MarshalTo(cmdW, &agentpb.RoleCommand{Body: &agentpb.RoleCommand_Action{Action: c}}); err == nil {
			a.unacked[c.ActionId] = c
		}
	}
	a.queued = nil
	a.mu.Unlock()
	readerDone := make(chan struct{})
	go func() { defer close(readerDone); a.readRole(repR) }()
	exited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		cmdW.Close()
		<-readerDone
		repR.Close()
		exited <- err
	}()
	return cmd, exited, nil
}

// readRole forwards the role's messages until its pipe closes.
func (a *Agent) readRole(r io.Reader) {
	br := bufio.NewReader(r)
	for {
		m := &agentpb.RoleMessage{}
		if err := (protodelim.UnmarshalOptions{MaxSize: 16 << 20}).UnmarshalFrom(br, m); err != nil {
			if err != io.EOF && !strings.Contains(err.Error(), "file already closed") {
				a.log.Warn("role channel", "err", err)
			}
			return
		}
		switch b := m.Body.(type) {
		case *agentpb.RoleMessage_Report:
			a.enqueue(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Report{Report: b.Report}}, false)
		case *agentpb.RoleMessage_Ack:
			// One line per action the role took: the record of what
			// this node applied, which outlives the scheduler that sent
			// it (the failover tests count these per action id).
			a.log.Info("action acked by the role", "action", b.Ack.ActionId, "applied", b.Ack.Applied,
				"iteration", b.Ack.AppliedIteration, "error", b.Ack.Error)
			a.acked(b.Ack)
		case *agentpb.RoleMessage_Stats:
			a.enqueue(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_ServerStats{ServerStats: b.Stats}}, false)
		case *agentpb.RoleMessage_Refusal:
			a.enqueue(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Refusal{Refusal: b.Refusal}}, false)
		case *agentpb.RoleMessage_Stacks:
			a.roleStacks(b.Stacks)
		case *agentpb.RoleMessage_Probe:
			a.roleProbe(b.Probe)
		}
	}
}

// settlePending answers the actions the role will never take.
func (a *Agent) settlePending(note string) {
	a.mu.Lock()
	var ids []string
	for id := range a.unacked {
		ids = append(ids, id)
	}
	for _, c := range a.queued {
		ids = append(ids, c.ActionId)
	}
	a.unacked, a.queued = map[string]*agentpb.ActionCommand{}, nil
	a.mu.Unlock()
	for _, id := range ids {
		a.acked(&agentpb.ActionAck{ActionId: id, Applied: true, Error: ""})
	}
	if len(ids) > 0 {
		a.log.Info("actions settled", "count", len(ids), "why", note)
	}
}

// acked records an action's outcome and tells the scheduler.
func (a *Agent) acked(ack *agentpb.ActionAck) {
	a.mu.Lock()
	a.taken[ack.ActionId] = ack
	delete(a.unacked, ack.ActionId)
	a.mu.Unlock()
	a.enqueue(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Ack{Ack: ack}}, true)
}

// take handles one action from the scheduler or, for a global action, from
// its primary agent, at most once per id; it says whether the action was
// new. The primary of a global action hands it to its forwarding loop
// first.
func (a *Agent) take(c *agentpb.ActionCommand) bool {
	a.mu.Lock()
	ack, seen := a.taken[c.ActionId]
	if seen {
		a.mu.Unlock()
		if ack != nil { // a replay after a reconnect: answer again, apply nothing
			a.enqueue(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Ack{Ack: ack}}, true)
		}
		return false
	}
	a.taken[c.ActionId] = nil
	to := a.toChild
	a.mu.Unlock()
	if c.Primary {
		a.forward(c)
	}
	switch c.Kind {
	case "KILL_RESTART":
		select {
		case a.restarts <- c.ActionId:
		default:
			a.acked(&agentpb.ActionAck{ActionId: c.ActionId, Error: "a restart is already under way"})
		}
		return true
	}
	a.mu.Lock()
	if to == nil {
		// The role is restarting: it gets the action when it runs again.
		a.queued = append(a.queued, c)
		a.mu.Unlock()
		return true
	}
	if _, err := protodelim.MarshalTo(to, &agentpb.RoleCommand{Body: &agentpb.RoleCommand_Action{Action: c}}); err != nil {
		// The role is going away (its pipe broke): the next run gets it.
		a.queued = append(a.queued, c)
	} else {
		a.unacked[c.ActionId] = c
	}
	a.mu.Unlock()
	return true
}

func (a *Agent) takenIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]string, 0, len(a.taken))
	for id := range a.taken {
		ids = append(ids, id)
	}
	return ids
}

// connectLoop keeps one stream to the scheduler, reconnecting with backoff.
func (a *Agent) connectLoop(ctx context.Context) {
	creds, err := a.credentials()
	if err != nil {
		a.log.Error("credentials", "err", err)
		return
	}
	target, opts := replicas.Target(a.o.Scheduler)
	cc, err := grpc.NewClient(target, append(opts, creds.DialOption(identity.IsScheduler), grpc.WithConnectParams(ReconnectParams))...)
	if err != nil {
		a.log.Error("dial scheduler", "err", err)
		return
	}
	defer cc.Close()
	attempt := 0
	for ctx.Err() == nil {
		err := a.session(ctx, agentpb.NewAgentClient(cc))
		if ctx.Err() != nil || (a.closed() && err == io.EOF) {
			return // the scheduler read everything to the end
		}
		if why := a.orphaned(err, time.Now()); why != "" {
			a.log.Error("stopping the role", "why", why)
			select {
			case a.stop <- why:
			default:
			}
			return
		}
		attempt++
		d := a.o.Backoff.Delay(min(attempt, 6), 0.5)
		a.log.Warn("scheduler stream ended; reconnecting", "err", err, "in", d)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return
		}
	}
}

// touch records contact with the scheduler.
func (a *Agent) touch() {
	a.mu.Lock()
	a.connected, a.contact = true, time.Now()
	a.mu.Unlock()
}

// orphaned says why the agent must stop its role after a session ended
// with err at now ("" to carry on): the scheduler does not know the job
// (it was removed, or the scheduler came back without it), or no scheduler
// has been reachable for the orphan timeout.
func (a *Agent) orphaned(err error, now time.Time) string {
	a.mu.Lock()
	if a.connected {
		a.connected = false
		a.contact = now
	}
	since := now.Sub(a.contact)
	a.mu.Unlock()
	if status.Code(err) == codes.NotFound {
		return "the scheduler does not know this node: " + status.Convert(err).Message()
	}
	if since >= a.o.OrphanTimeout {
		return fmt.Sprintf("orphaned: no scheduler for %s (--orphan-timeout %s)", since.Round(time.Second), a.o.OrphanTimeout)
	}
	return ""
}

// session runs one stream: hello, then messages both ways until it fails.
func (a *Agent) session(ctx context.Context, c agentpb.AgentClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Connect(ctx)
	if err != nil {
		return err
	}
	hello := &agentpb.AgentHello{Job: a.o.Job, Node: a.o.Node, Role: a.o.Role, Host: a.o.Host,
		AgentPid: int32(os.Getpid()), AppliedActions: a.takenIDs(), PeerAddr: a.peerAddr}
	if err := stream.Send(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Hello{Hello: hello}}); err != nil {
		return err
	}
	a.touch()
	sendErr := make(chan error, 1)
	go func() {
		tick := time.NewTicker(a.o.Heartbeat)
		defer tick.Stop()
		for {
			var m *agentpb.AgentMessage
			select {
			case m = <-a.outbox:
			case <-tick.C:
				a.mu.Lock()
				st := proto(&a.status)
				a.mu.Unlock()
				m = &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{Status: st}}}
			case <-a.closing:
				// The role has ended: what is queued leaves, then the
				// sending side closes; the scheduler ends the stream
				// once it has read it all (Recv below sees io.EOF).
				for len(a.outbox) > 0 {
					if err := stream.Send(<-a.outbox); err != nil {
						sendErr <- err
						return
					}
				}
				if err := stream.CloseSend(); err != nil {
					sendErr <- err
				}
				return
			case <-ctx.Done():
				return
			}
			if err := stream.Send(m); err != nil {
				sendErr <- err
				return
			}
			a.touch()
		}
	}()
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}

			switch b := m.Body.(type) {
			case *agentpb.SchedulerMessage_Command:
				a.take(b.Command)
			case *agentpb.SchedulerMessage_Stop:
				select {
				case a.stop <- b.Stop:
				default:
				}
			case *agentpb.SchedulerMessage_Stacks:
				go a.stacks(b.Stacks) // waits for the role: not on this loop
			case *agentpb.SchedulerMessage_Probe:
				go a.probe(b.Probe) // waits for the role too
			}
		}
	}()
	select {
	case err = <-sendErr:
	case err = <-recvErr:
	case <-ctx.Done():
		err = ctx.Err()
	}
	return err
}
