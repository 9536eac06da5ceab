package manager

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/textclean"
)

// Bounds of a stacks collection (kelpie job stacks).
const (
	// StacksPerNode is the most text one node's answer may hold.
	StacksPerNode = 1 << 20
	// StacksPerJob is the most text one collection may hold: nodes past it
	// are listed without their stacks.
	StacksPerJob = 16 << 20
	// StacksTimeout is how long a collection waits for the agents by
	// default; StacksMaxTimeout the most a caller may ask for.
	StacksTimeout    = 5 * time.Second
	StacksMaxTimeout = time.Minute
)

// stackWaits routes the agents' answers to the collections waiting for
// them, by request id (the stream's node name checked against it).
type stackWaits struct {
	mu   sync.Mutex
	next atomic.Uint64
	wait map[string]*stackWait
}

type stackWait struct {
	node string
	ch   chan *agentpb.StacksReply
}

// stacksReply hands an agent's answer to the collection that asked for it;
// an answer nobody waits for (late, or for another node) is dropped.
func (m *Manager) stacksReply(node string, r *agentpb.StacksReply) {
	m.stackWaits.mu.Lock()
	w := m.stackWaits.wait[r.GetId()]
	if w != nil && w.node == node {
		delete(m.stackWaits.wait, r.GetId())
	} else {
		w = nil
	}
	m.stackWaits.mu.Unlock()
	if w != nil {
		w.ch <- r // buffered: one answer per request
	}
}

// Stacks collects the stacks of every node of a live job through its
// agents (an operator command: the console checks the caller), within
// timeout (StacksTimeout if 0). Every node has an entry, in the console's
// order; a node whose agent is not connected, or did not answer in time,
// has an error instead of (or besides) its stacks. The collection is saved
// with the job's history (the last one per job) and an event names who
// asked. With saved, the last saved collection is returned instead.
func (m *Manager) Stacks(ctx context.Context, job string, timeout time.Duration, saved bool, who string) ([]*consolepb.NodeStacks, error) {
	if saved {
		return m.savedStacks(job)
	}
	j, ok := m.lookup(job)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no job %q", job)
	}
	if timeout <= 0 {
		timeout = StacksTimeout
	}
	timeout = min(timeout, StacksMaxTimeout)
	type asked struct {
		n    *nodeState
		conn *agentConn // nil: its agent is not connected
		id   string
		ch   chan *agentpb.StacksReply
		err  string
	}
	var all []*asked
	over := false
	j.onActor(func() {
		if over = j.over(); over {
			return
		}
		for _, n := range sortedNodes(j.nodes) {
			if !n.removed {
				all = append(all, &asked{n: n, conn: n.conn})
			}
		}
	})
	if over {
		return nil, status.Errorf(codes.FailedPrecondition, "job %s has ended: its processes are gone (--saved shows the last stacks collected)", job)
	}
	for _, a := range all {
		n := a.n
		if a.conn == nil {
			a.err = "its agent is not connected"
			continue
		}
		a.id = "stacks-" + strconv.FormatUint(m.stackWaits.next.Add(1), 10)
		a.ch = make(chan *agentpb.StacksReply, 1)
		m.stackWaits.mu.Lock()
		if m.stackWaits.wait == nil {
			m.stackWaits.wait = map[string]*stackWait{}
		}
		m.stackWaits.wait[a.id] = &stackWait{node: n.name, ch: a.ch}
		m.stackWaits.mu.Unlock()
		// The agent waits for its role a little less than we wait for it.
		req := &agentpb.StacksRequest{Id: a.id, MaxBytes: StacksPerNode, TimeoutS: (timeout * 3 / 4).Seconds()}
		if !a.conn.send(&agentpb.SchedulerMessage{Body: &agentpb.SchedulerMessage_Stacks{Stacks: req}}) {
			a.err = "its agent's stream is full or closing"
			a.ch = nil
		}
	}

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	out := make([]*consolepb.NodeStacks, 0, len(all))
	budget := StacksPerJob
	late := false
	for _, a := range all {
		ns := &consolepb.NodeStacks{Node: a.n.name, Role: a.n.role, Error: a.err}
		if a.ch != nil && !late {
			select {
			case r := <-a.ch:
				ns.Text, ns.Error, ns.Truncated = textclean.Lines(r.GetText(), StacksPerNode), textclean.Clean(r.GetError(), 4096), r.GetTruncated()
			case <-deadline.C:
				late = true
			case <-ctx.Done():
				late = true
			}
		}
		if a.ch != nil && ns.Text == "" && ns.Error == "" {
			ns.Error = fmt.Sprintf("its agent did not answer within %s", timeout)
		}
		if len(ns.Text) > budget {
			ns.Text, ns.Truncated = "", true
			ns.Error = fmt.Sprintf("left out: the collection reached its bound of %d MiB", StacksPerJob>>20)
		}
		budget -= len(ns.Text)
		ns.Time = ts(m.now())
		out = append(out, ns)
	}
	m.stackWaits.mu.Lock()
	for _, a := range all {
		delete(m.stackWaits.wait, a.id)
	}
	m.stackWaits.mu.Unlock()
	answered := 0
	for _, ns := range out {
		if ns.Text != "" {
			answered++
		}
	}
	m.event(job, "job", "", fmt.Sprintf("stacks of %s collected: %d of %d nodes answered", job, answered, len(out)), who)
	if b, err := proto.Marshal(&consolepb.CommandResult{Stacks: out}); err == nil {
		if err := m.cfg.Store.PutStacks(job, b); err != nil {
			m.log.Error("store stacks", "job", job, "err", err)
		}
	}
	return out, nil
}

// savedStacks is the last collection saved with the job's history.
func (m *Manager) savedStacks(job string) ([]*consolepb.NodeStacks, error) {
	b, ok, err := m.cfg.Store.GetStacks(job)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "stacks of %s: %v", job, err)
	}
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no stacks saved for job %q", job)
	}
	var r consolepb.CommandResult
	if err := proto.Unmarshal(b, &r); err != nil {
		return nil, status.Errorf(codes.Internal, "stacks of %s: %v", job, err)
	}
	return r.Stacks, nil
}
