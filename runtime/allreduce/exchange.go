package allreduce

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kelpie/kelpie/runtime/wire"
)

// Config is one node's place in an allreduce group.
type Config struct {
	// Self is this node's index; Addrs[i] is node i's listen address
	// (Addrs[Self] is not dialled).
	Self  int
	Addrs []string
	// Listener accepts the other nodes' connections; the Exchange closes it.
	Listener net.Listener
	// Group names the group (the job): a node of another group is refused
	// at the handshake.
	Group string
	// Dial opens a connection to a peer; nil dials plain TCP. It is the
	// place for credentials: a dialer that wraps the connection in TLS (and
	// a Listener that does the same) authenticates peers.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Region names each node's region for the byte counters (nil: one
	// region, nothing crosses).
	Region func(node int) string
	// BeforeSend, if set, runs before the node sends in each step of a
	// plan (it has received everything the step depends on): the place to
	// inject a node that pauses (RAT §4's nodes that stop sending).
	BeforeSend func(ctx context.Context, step int)
}

// The handshake: magic, version, the dialler's index and the group name.
const (
	magic      = "KLAR"
	version    = 1
	maxGroup   = 255
	headerSize = 8 + 4 + 4 + 4 // exchange sequence, step, chunk, elements
	dialRetry  = 50 * time.Millisecond
)

// Exchange is one node's connections to every other node of its group: it
// dials each peer once (the connection it sends on) and accepts one
// connection from each (the one it receives on). One goroutine at a time may
// call Run; Bytes may be read from any goroutine.
type Exchange struct {
	cfg  Config
	out  []net.Conn // to node j
	in   []net.Conn // from node j
	seq  uint64
	sent []atomic.Int64 // payload bytes sent to node j
	mu   sync.Mutex
	dead error // set once a connection failed; the Exchange is then unusable
}

// Connect builds the mesh: it dials every peer (retrying until ctx ends,
// since peers start at different times) and accepts a connection from each.
func Connect(ctx context.Context, cfg Config) (*Exchange, error) {
	n := len(cfg.Addrs)
	if cfg.Self < 0 || cfg.Self >= n {
		return nil, fmt.Errorf("allreduce: node %d outside a group of %d", cfg.Self, n)
	}
	if len(cfg.Group) > maxGroup {
		return nil, fmt.Errorf("allreduce: group name of %d bytes; at most %d", len(cfg.Group), maxGroup)
	}
	if cfg.Listener == nil {
		return nil, errors.New("allreduce: no listener")
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	e := &Exchange{cfg: cfg, out: make([]net.Conn, n), in: make([]net.Conn, n), sent: make([]atomic.Int64, n)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var acceptErr error
	dialErrs := make([]error, n)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if acceptErr = e.accept(ctx, n-1); acceptErr != nil {
			cancel()
		}
	}()
	for j := range n {
		if j == cfg.Self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := e.dial(ctx, j)
			if err != nil {
				dialErrs[j] = err
				cancel()
				return
			}
			e.out[j] = c
		}()
	}
	wg.Wait()
	if err := errors.Join(dialErrs...); err != nil || acceptErr != nil {
		var missing []int
		for j, c := range e.in {
			if c == nil && j != cfg.Self {
				missing = append(missing, j)
			}
		}
		e.Close()
		if acceptErr != nil && len(missing) > 0 {
			acceptErr = fmt.Errorf("allreduce: node %d: no connection from nodes %v: %v", cfg.Self, missing, acceptErr)
		}
		return nil, errors.Join(err, acceptErr)
	}
	return e, nil
}

func (e *Exchange) dial(ctx context.Context, j int) (net.Conn, error) {
	addr := e.cfg.Addrs[j]
	for {
		c, err := e.cfg.Dial(ctx, addr)
		if err == nil {
			hello := make([]byte, 0, 4+1+4+1+len(e.cfg.Group))
			hello = append(hello, magic...)
			hello = append(hello, version)
			hello = binary.LittleEndian.AppendUint32(hello, uint32(e.cfg.Self))
			hello = append(hello, byte(len(e.cfg.Group)))
			hello = append(hello, e.cfg.Group...)
			if _, err = c.Write(hello); err == nil {
				return c, nil
			}
			c.Close()
		}
		t := time.NewTimer(dialRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("allreduce: node %d: dial node %d at %s: %v (last error %v)", e.cfg.Self, j, addr, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// accept takes want connections, one from each other node.
func (e *Exchange) accept(ctx context.Context, want int) error {
	stop := context.AfterFunc(ctx, func() { e.cfg.Listener.Close() })
	defer stop()
	for got := 0; got < want; {
		c, err := e.cfg.Listener.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("allreduce: node %d: no connection from %s: %v", e.cfg.Self, e.missing(), ctx.Err())
			}
			return fmt.Errorf("allreduce: node %d: accept: %v", e.cfg.Self, err)
		}
		from, err := e.hello(c)
		if err != nil {
			c.Close() // a stranger or a late duplicate: refused, keep waiting
			continue
		}
		e.in[from] = c
		got++
	}
	return nil
}

// missing names the peers that have not connected in yet ("node 1",
// "nodes 1, 3").
func (e *Exchange) missing() string {
	var ids []string
	for j, c := range e.in {
		if c == nil && j != e.cfg.Self {
			ids = append(ids, strconv.Itoa(j))
		}
	}
	if len(ids) == 1 {
		return "node " + ids[0]
	}
	return "nodes " + strings.Join(ids, ", ")
}

// hello reads and checks a peer's handshake (bounded: a slow or silent
// stranger is dropped after a few seconds).
func (e *Exchange) hello(c net.Conn) (int, error) {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var h [10]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, err
	}
	if string(h[:4]) != magic || h[4] != version {
		return 0, fmt.Errorf("allreduce: bad handshake %q", h[:5])
	}
	from := int(binary.LittleEndian.Uint32(h[5:9]))
	g := make([]byte, h[9])
	if _, err := io.ReadFull(c, g); err != nil {
		return 0, err
	}
	switch {
	case string(g) != e.cfg.Group:
		return 0, fmt.Errorf("allreduce: peer of group %q; this is %q", g, e.cfg.Group)
	case from < 0 || from >= len(e.in) || from == e.cfg.Self:
		return 0, fmt.Errorf("allreduce: peer claims node %d", from)
	case e.in[from] != nil:
		return 0, fmt.Errorf("allreduce: node %d connected twice", from)
	}
	return from, nil
}

// Close ends every connection and the listener.
func (e *Exchange) Close() {
	e.cfg.Listener.Close()
	for _, cs := range [][]net.Conn{e.out, e.in} {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}
}

// Sent returns the payload bytes this node has sent to each node.
func (e *Exchange) Sent() []int64 {
	out := make([]int64, len(e.sent))
	for i := range e.sent {
		out[i] = e.sent[i].Load()
	}
	return out
}

// Bytes returns the payload bytes this node has sent across regions, by
// region pair.
func (e *Exchange) Bytes() map[Pair]int64 {
	out := map[Pair]int64{}
	if e.cfg.Region == nil {
		return out
	}
	me := e.cfg.Region(e.cfg.Self)
	for j, b := range e.Sent() {
		if r := e.cfg.Region(j); b > 0 && r != me {
			out[Pair{me, r}] += b
		}
	}
	return out
}

// CrossBytes is the total of Bytes.
func (e *Exchange) CrossBytes() int64 {
	var s int64
	for _, b := range e.Bytes() {
		s += b
	}
	return s
}

// Run performs this node's part of plan p on vec (len p.Len), in place.
// Within a step it sends to each peer on its own goroutine and receives
// from each peer on its own, then applies what it received in plan order,
// so every node computes exactly what Simulate does. If ctx ends or a peer
// fails, the connections are closed and the Exchange cannot be used again.
func (e *Exchange) Run(ctx context.Context, p *Plan, vec []float32) error {
	if err := e.err(); err != nil {
		return err
	}
	if p.Nodes != len(e.out) {
		return fmt.Errorf("allreduce: %s plan for %d nodes on a group of %d", p.Kind, p.Nodes, len(e.out))
	}
	if len(vec) != p.Len {
		return fmt.Errorf("allreduce: %d elements for a %s plan of %d", len(vec), p.Kind, p.Len)
	}
	stop := context.AfterFunc(ctx, func() { e.fail(ctx.Err()) })
	defer stop()
	e.seq++
	me := e.cfg.Self
	for s, step := range p.Steps {
		var sends, recvs [][]Transfer // by peer
		sends, recvs = make([][]Transfer, p.Nodes), make([][]Transfer, p.Nodes)
		var order []int // indexes into step of this node's receives
		for k, t := range step {
			if t.From == me {
				sends[t.To] = append(sends[t.To], t)
			}
			if t.To == me {
				recvs[t.From] = append(recvs[t.From], t)
				order = append(order, k)
			}
		}
		got := make(map[int][]float32, len(order)) // step index -> payload
		var gotMu sync.Mutex
		var wg sync.WaitGroup
		errs := make([]error, 2*p.Nodes)
		if e.cfg.BeforeSend != nil && slices.ContainsFunc(sends, func(ts []Transfer) bool { return len(ts) > 0 }) {
			e.cfg.BeforeSend(ctx, s)
		}
		for j := range p.Nodes {
			if len(sends[j]) > 0 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[j] = e.send(j, s, p, sends[j], vec)
				}()
			}
			if len(recvs[j]) > 0 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					bufs, err := e.recv(j, s, p, recvs[j])
					if err != nil {
						errs[p.Nodes+j] = err
						return
					}
					gotMu.Lock()
					defer gotMu.Unlock()
					// Transfers from one peer arrive in plan order.
					i := 0
					for _, k := range order {
						if step[k].From == j {
							got[k] = bufs[i]
							i++
						}
					}
				}()
			}
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				e.fail(err)
				return e.err()
			}
		}
		for _, k := range order {
			t := step[k]
			r := p.Chunks[t.Chunk]
			apply(t.Op, vec[r.Off:r.Off+r.Len], got[k])
		}
	}
	return nil
}

// fail records the first error and closes the connections, which unblocks
// every goroutine reading or writing them.
func (e *Exchange) fail(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead == nil {
		e.dead = err
		e.Close()
	}
}

func (e *Exchange) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dead
}

func (e *Exchange) send(j, step int, p *Plan, ts []Transfer, vec []float32) error {
	bufs := make(net.Buffers, 0, 2*len(ts))
	var n int64
	for _, t := range ts {
		r := p.Chunks[t.Chunk]
		h := make([]byte, headerSize)
		binary.LittleEndian.PutUint64(h, e.seq)
		binary.LittleEndian.PutUint32(h[8:], uint32(step))
		binary.LittleEndian.PutUint32(h[12:], uint32(t.Chunk))
		binary.LittleEndian.PutUint32(h[16:], uint32(r.Len))
		bufs = append(bufs, h, wire.AsBytes(vec[r.Off:r.Off+r.Len]))
		n += 4 * int64(r.Len)
	}
	if _, err := bufs.WriteTo(e.out[j]); err != nil {
		return fmt.Errorf("allreduce: node %d: send step %d to node %d: %v", e.cfg.Self, step, j, err)
	}
	e.sent[j].Add(n)
	return nil
}

// recv reads the transfers ts from node j, checking each header against
// the plan, and returns their payloads.
func (e *Exchange) recv(j, step int, p *Plan, ts []Transfer) ([][]float32, error) {
	c := e.in[j]
	out := make([][]float32, len(ts))
	var h [headerSize]byte
	for i, t := range ts {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return nil, fmt.Errorf("allreduce: node %d: receive step %d from node %d: %v", e.cfg.Self, step, j, err)
		}
		seq := binary.LittleEndian.Uint64(h[:])
		gs, gc, gl := binary.LittleEndian.Uint32(h[8:]), binary.LittleEndian.Uint32(h[12:]), binary.LittleEndian.Uint32(h[16:])
		want := p.Chunks[t.Chunk].Len
		if seq != e.seq || int(gs) != step || int(gc) != t.Chunk || int(gl) != want {
			return nil, fmt.Errorf("allreduce: node %d: from node %d got exchange %d step %d chunk %d of %d elements; want exchange %d step %d chunk %d of %d",
				e.cfg.Self, j, seq, gs, gc, gl, e.seq, step, t.Chunk, want)
		}
		b := make([]byte, 4*want)
		if _, err := io.ReadFull(c, b); err != nil {
			return nil, fmt.Errorf("allreduce: node %d: receive step %d from node %d: %v", e.cfg.Self, step, j, err)
		}
		out[i] = wire.AsFloats(b)
	}
	return out, nil
}
