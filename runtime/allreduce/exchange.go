package allreduce

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kelpie/kelpie/core/reduceplan"
	"github.com/kelpie/kelpie/runtime/wire"
)

// Config is one node's place in an allreduce group.
type Config struct {
	// Self is this node's index; Addrs[i] is node i's listen address
	// (Addrs[Self] is not dialled).
	Self  int
	Addrs []string
	// Listener accepts the other nodes' connections; the Exchange closes
	// it, unless KeepListener (a Group forms mesh after mesh on one).
	Listener     net.Listener
	KeepListener bool
	// Resolve, if set, gives node j's address afresh for every dial
	// attempt (a restarted peer registers a new one); Addrs is then
	// unused.
	Resolve func(ctx context.Context, j int) (string, error)
	// Group names the group (the job): a node of another group is refused
	// at the handshake.
	Group string
	// Dial opens a connection to a peer; nil dials plain TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Security authenticates peers (and may encrypt); nil: none, the
	// runtime's own tests.
	Security *Security
	// Name names node j (worker-3), which an encrypted peer's certificate
	// must name; required with TLS.
	Name func(j int) string
	// Region names each node's region for the byte counters (nil: one
	// region, nothing crosses).
	Region func(node int) string
	// BeforeSend, if set, runs before the node sends in each step of a
	// plan (it has received everything the step depends on): the place to
	// inject a node that pauses (RAT §4's nodes that stop sending).
	BeforeSend func(ctx context.Context, step int)
	// AttemptTimeout bounds one attempt to reach a peer (resolving its
	// address, connecting, the security handshake and its welcome); the
	// attempt is then given up and made again (0: DefaultAttemptTimeout).
	AttemptTimeout time.Duration
}

// DefaultAttemptTimeout bounds one dial attempt: an attempt that a peer
// never answers (lost, or stuck somewhere between the two ends) costs
// that long, not the whole time given to forming the mesh. A peer that is
// merely late (still in its iteration) takes the next attempt; the
// abandoned one is refused at its handshake when the peer gets to it.
const DefaultAttemptTimeout = 10 * time.Second

// The handshake: magic, version, the dialler's index and the group name;
// the acceptor answers welcomeByte when it takes the connection.
const (
	magic      = "KLAR"
	version    = 2
	maxGroup   = 255
	headerSize = 8 + 4 + 4 + 4 // exchange sequence, step, chunk, elements
	dialRetry  = 50 * time.Millisecond
	// welcomeByte is the acceptor's answer to a hello it takes.
	welcomeByte = 0x57
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
	// outMu serialises the frames chunks write to node j.
	outMu  []sync.Mutex
	mu     sync.Mutex
	dead   error        // set once a connection failed; the Exchange is then unusable
	left   error        // on mu: a peer closed its end after a completed Run (watch)
	formed bool         // on mu: the mesh is complete (form)
	runs   atomic.Int64 // Runs completed
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
	if sec := cfg.Security; sec != nil && (sec.ServerTLS != nil) != (sec.ClientTLS != nil) {
		return nil, errors.New("allreduce: TLS for one direction only: give both ends' configurations or neither")
	}
	if sec := cfg.Security; sec != nil && sec.ServerTLS != nil && (cfg.Name == nil || sec.PeerNode == nil) {
		return nil, errors.New("allreduce: encrypted peers need the nodes' names to check their certificates")
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	e := &Exchange{cfg: cfg, out: make([]net.Conn, n), in: make([]net.Conn, n), sent: make([]atomic.Int64, n), outMu: make([]sync.Mutex, n)}
	if err := e.form(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// dialled is a dialler's news for form: node j welcomed a connection (c),
// or closed the one it had welcomed (c nil).
type dialled struct {
	j int
	c net.Conn
}

// form connects the mesh. It is formed when this node holds, at one
// moment, a connection welcomed by every peer and one from every peer;
// until then it goes on accepting (the newest connection from a node
// wins) and dials a peer again when the peer closes the connection it
// welcomed. A peer closes it when it gives up the attempt that welcomed
// this node (its time ran out waiting for another node) and forms again,
// waiting for this node to dial anew: holding on to the closed connection
// would leave that peer waiting for ever, and the peers waiting for it.
func (e *Exchange) form(ctx context.Context) error {
	n := len(e.out)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	formed := make(chan struct{})
	outs := make(chan dialled)
	admits := make(chan admitted)
	acceptErr := make(chan error, 1)
	dialErrs := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		acceptErr <- e.acceptLoop(ctx, admits)
	}()
	for j := range n {
		if j == e.cfg.Self {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dialErrs[j] = e.keepDialled(ctx, j, outs, formed)
		}()
	}
	inSeq := make([]uint64, n) // the accept order of e.in[j]
	var err error
	for nout, nin := 0, 0; err == nil && (nout < n-1 || nin < n-1); {
		select {
		case d := <-outs:
			if e.out[d.j] = d.c; d.c != nil {
				nout++
			} else {
				nout--
			}
		case a := <-admits:
			// The newest connection from a node wins: an older one is
			// left from an attempt that node has given up (a node dials
			// again only once its last attempt was closed). Newest is by
			// the listener's order: handshakes end in any order.
			if a.seq < inSeq[a.from] {
				a.c.Close()
				continue
			}
			if _, werr := a.c.Write([]byte{welcomeByte}); werr != nil {
				a.c.Close()
				continue
			}
			if old := e.in[a.from]; old != nil {
				old.Close()
			} else {
				nin++
			}
			e.in[a.from], inSeq[a.from] = a.c, a.seq
		case err = <-acceptErr:
			if ctx.Err() == nil {
				err = fmt.Errorf("accept: %w", err)
			}
		case <-ctx.Done():
		}
		if err == nil {
			err = ctx.Err()
		}
	}
	if err == nil {
		e.mu.Lock()
		e.formed = true
		e.mu.Unlock()
		close(formed)
	}
	cancel() // the accepting goroutine and the diallers still dialling stop
	wg.Wait()
	if err == nil {
		return nil
	}
	if m := e.missing(); m != "" {
		err = fmt.Errorf("allreduce: node %d: no connection from %s: %w", e.cfg.Self, m, err)
	} else {
		err = fmt.Errorf("allreduce: node %d: mesh not formed: %w", e.cfg.Self, err)
	}
	return errors.Join(errors.Join(dialErrs...), err)
}

// keepDialled dials node j and holds the connection it welcomes until the
// mesh is formed, dialling again whenever node j closes it before then
// (form). Its error is the last dial's when ctx ends first.
func (e *Exchange) keepDialled(ctx context.Context, j int, outs chan<- dialled, formed <-chan struct{}) error {
	for {
		c, err := e.dial(ctx, j)
		if err != nil {
			return err
		}
		lost := e.watch(j, c)
		select {
		case outs <- dialled{j: j, c: c}:
		case <-ctx.Done():
			c.Close()
			return nil
		}
		select {
		case <-formed:
			return nil
		case <-ctx.Done():
			return nil // form closes c with the rest, or it is the mesh's
		case <-lost:
		}
		c.Close()
		select {
		case outs <- dialled{j: j}:
		case <-ctx.Done():
			// The mesh formed with c counted (the news came too late):
			// it is the mesh's, and the mesh is dead.
			select {
			case <-formed:
				e.fail(fmt.Errorf("allreduce: node %d: node %d closed its end while the mesh formed", e.cfg.Self, j))
			default:
			}
			return nil
		}
	}
}

// watch notices node j closing the connection this node sends on (c),
// which nothing is ever read from after the welcome. Before the mesh is
// formed, that is a peer giving up the attempt that welcomed this node:
// the returned channel says so, and the dialler dials again. After the
// mesh is formed but before this node has completed a Run on it, it means
// the welcome came from a mesh the peer gave up while this node was
// finishing its own (the peer is forming again, waiting for this node to
// dial it anew): the Exchange fails at once, also a Run under way, which
// could otherwise wait forever for peers that wait for that peer — a
// deadlock of the whole group. After a completed Run it is a peer leaving
// at an iteration boundary (removed, or forming the next membership's
// mesh) once it has everything it needed: the Run under way finishes and
// the next one fails.
func (e *Exchange) watch(j int, c net.Conn) <-chan struct{} {
	lost := make(chan struct{})
	go func() {
		var b [1]byte
		_, err := c.Read(b[:])
		if err == nil {
			err = errors.New("a byte where nothing is sent")
		}
		err = fmt.Errorf("allreduce: node %d: node %d closed its end of the mesh (%v)", e.cfg.Self, j, err)
		e.mu.Lock()
		formed := e.formed
		if formed && e.runs.Load() > 0 && e.left == nil {
			e.left = err
		}
		e.mu.Unlock()
		switch {
		case !formed:
			close(lost)
		case e.runs.Load() == 0:
			e.fail(err)
		}
	}()
	return lost
}

func (e *Exchange) dial(ctx context.Context, j int) (net.Conn, error) {
	var addr string
	if e.cfg.Resolve == nil {
		addr = e.cfg.Addrs[j]
	}
	attempt := e.cfg.AttemptTimeout
	if attempt <= 0 {
		attempt = DefaultAttemptTimeout
	}
	for {
		var c net.Conn
		var err error
		actx, cancel := context.WithTimeout(ctx, attempt)
		if e.cfg.Resolve != nil {
			addr, err = e.cfg.Resolve(actx, j)
		}
		if err == nil {
			c, err = e.dialOnce(actx, j, addr)
		}
		cancel()
		if err == nil {
			return c, nil
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

// dialOnce connects to node j at addr: the security handshake, then the
// hello naming the group and this node, which the peer answers once it has
// taken the connection into its mesh (one it refuses, of another
// membership, it closes: the caller dials again).
func (e *Exchange) dialOnce(ctx context.Context, j int, addr string) (net.Conn, error) {
	c, err := e.cfg.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	if e.cfg.Security != nil {
		// The security handshake sets deadlines of its own: the attempt's
		// end interrupts it.
		raw := c
		stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Now()) })
		c, err = e.secureDial(c, j)
		if !stop() && err == nil {
			c.Close()
			err = fmt.Errorf("security handshake: %w", ctx.Err())
		}
		if err != nil {
			return nil, err
		}
	}
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d) // the hello too is bounded by the attempt
	}
	hello := make([]byte, 0, 4+1+4+1+len(e.cfg.Group))
	hello = append(hello, magic...)
	hello = append(hello, version)
	hello = binary.LittleEndian.AppendUint32(hello, uint32(e.cfg.Self))
	hello = append(hello, byte(len(e.cfg.Group)))
	hello = append(hello, e.cfg.Group...)
	if _, err = c.Write(hello); err == nil {
		err = e.welcome(ctx, c)
	}
	if err == nil {
		err = c.SetDeadline(time.Time{})
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// secureDial runs the security handshake on a connection dialled to node
// j, which must be who it is.
func (e *Exchange) secureDial(c net.Conn, j int) (net.Conn, error) {
	sc, err := e.cfg.Security.client(c)
	if err == nil && sc.node != "" {
		err = checkNode(sc.node, e.cfg.Name(j))
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return sc.conn, nil
}

// welcome waits for the peer's answer to the hello (until ctx ends: a
// peer takes connections only while it forms its mesh).
func (e *Exchange) welcome(ctx context.Context, c net.Conn) error {
	stop := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	defer stop()
	var ok [1]byte
	if _, err := io.ReadFull(c, ok[:]); err != nil {
		return fmt.Errorf("no welcome: %w", err)
	}
	if ok[0] != welcomeByte {
		return fmt.Errorf("welcome %#x", ok[0])
	}
	return nil
}

// maxHandshakes bounds the connections in their handshake at once: a
// stranger that stalls holds one slot for at most the handshake's time and
// keeps no peer out; beyond the bound new connections are closed.
const maxHandshakes = 32

// admitted is a connection that passed the handshake.
type admitted struct {
	c    net.Conn
	from int
	seq  uint64 // its place in the order the listener accepted connections
}

// acceptLoop accepts connections until ctx ends and hands form each that
// passes its handshake (admit). Handshakes run concurrently, so a slow
// stranger does not delay the peers. Its error is the listener's.
func (e *Exchange) acceptLoop(ctx context.Context, admits chan<- admitted) error {
	unblock := func() { e.cfg.Listener.Close() }
	d, canDeadline := e.cfg.Listener.(interface{ SetDeadline(time.Time) error })
	if canDeadline && e.cfg.KeepListener {
		_ = d.SetDeadline(time.Time{})
		unblock = func() { _ = d.SetDeadline(time.Now()) }
	}
	stop := context.AfterFunc(ctx, unblock)
	defer stop()
	// Ending dctx closes the connections still in their handshake.
	dctx, dcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		// Stop the handshakes under way (the listener stays open for the
		// next mesh when KeepListener).
		dcancel()
		wg.Wait()
		if canDeadline && e.cfg.KeepListener {
			_ = d.SetDeadline(time.Time{})
		}
	}()
	slots := make(chan struct{}, maxHandshakes)
	for seq := uint64(1); ; seq++ {
		c, err := e.cfg.Listener.Accept()
		if err != nil {
			return err
		}
		select {
		case slots <- struct{}{}:
		default:
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			stopClose := context.AfterFunc(dctx, func() { c.Close() })
			a, err := e.admit(c)
			a.seq = seq
			if !stopClose() || err != nil {
				c.Close() // a stranger or a late duplicate: refused, keep waiting
				return
			}
			select {
			case admits <- a:
			case <-dctx.Done():
				a.c.Close()
			}
		}()
	}
}

// admit runs the handshake of a connection accepted: the security
// handshake (Config.Security), then the hello naming the group and the
// node. A refusal by the security is logged.
func (e *Exchange) admit(c net.Conn) (admitted, error) {
	var certNode string
	if sec := e.cfg.Security; sec != nil {
		sc, err := sec.server(c)
		if err != nil {
			sec.refused("unauthenticated", c.RemoteAddr(), err)
			return admitted{}, err
		}
		c, certNode = sc.conn, sc.node
	}
	from, err := e.hello(c)
	if err != nil {
		c.Close()
		return admitted{}, err
	}
	if certNode != "" {
		if err := checkNode(certNode, e.cfg.Name(from)); err != nil {
			e.cfg.Security.refused(certNode, c.RemoteAddr(), err)
			c.Close()
			return admitted{}, err
		}
	}
	return admitted{c: c, from: from}, nil
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
	}
	return from, nil
}

// Close ends every connection and the listener (unless KeepListener).
func (e *Exchange) Close() {
	if !e.cfg.KeepListener {
		e.cfg.Listener.Close()
	}
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
func (e *Exchange) Bytes() map[reduceplan.Pair]int64 {
	out := map[reduceplan.Pair]int64{}
	if e.cfg.Region == nil {
		return out
	}
	me := e.cfg.Region(e.cfg.Self)
	for j, b := range e.Sent() {
		if r := e.cfg.Region(j); b > 0 && r != me {
			out[reduceplan.Pair{From: me, To: r}] += b
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
//
// Chunks progress independently, as data flows: a chunk's transfers of
// step s leave this node once it has applied everything the chunk receives
// in earlier steps, and what a chunk receives in one step is applied in
// plan order once all of it has arrived — so every node computes exactly
// what Simulate does, while a peer that stalls holds up only the chunks
// that wait for it (RAT §4: with PS or RAT, the other nodes go on). One
// goroutine per chunk this node takes part in, and one reader per peer it
// receives from. If ctx ends or a peer fails, the connections are closed
// and the Exchange cannot be used again.
func (e *Exchange) Run(ctx context.Context, p *reduceplan.Plan, vec []float32) error {
	e.mu.Lock()
	if e.left != nil && e.dead == nil {
		e.dead = e.left
		e.Close()
	}
	e.mu.Unlock()
	if err := e.err(); err != nil {
		return err
	}
	if p.Nodes != len(e.out) {
		return fmt.Errorf("allreduce: %s plan for %d nodes on a group of %d", p.Kind, p.Nodes, len(e.out))
	}
	if len(vec) != p.Len {
		return fmt.Errorf("allreduce: %d elements for a %s plan of %d", len(vec), p.Kind, p.Len)
	}
	abort := make(chan struct{})
	var abortOnce sync.Once
	failRun := func(err error) {
		e.fail(err)
		abortOnce.Do(func() { close(abort) })
	}
	stop := context.AfterFunc(ctx, func() { failRun(ctx.Err()) })
	defer stop()
	e.seq++
	me := e.cfg.Self
	// This node's part of each chunk, step by step (receives in plan
	// order).
	parts := make([][]chunkStep, len(p.Chunks))
	expect := make([]map[frameKey]bool, p.Nodes) // what each peer sends here
	nrecv := make([]int, len(p.Chunks))
	for s, step := range p.Steps {
		for _, t := range step {
			if t.From != me && t.To != me {
				continue
			}
			ps := parts[t.Chunk]
			if len(ps) == 0 || ps[len(ps)-1].step != s {
				ps = append(ps, chunkStep{step: s})
			}
			sp := &ps[len(ps)-1]
			if t.From == me {
				sp.sends = append(sp.sends, t)
			} else {
				sp.recvs = append(sp.recvs, t)
				nrecv[t.Chunk]++
				if expect[t.From] == nil {
					expect[t.From] = map[frameKey]bool{}
				}
				expect[t.From][frameKey{s, t.Chunk}] = true
			}
			parts[t.Chunk] = ps
		}
	}
	mail := make([]chan frame, len(p.Chunks))
	for c, n := range nrecv {
		mail[c] = make(chan frame, n) // readers never wait on a chunk
	}
	var wg sync.WaitGroup
	var firstErr error
	var errMu sync.Mutex
	report := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		failRun(err)
	}
	for j, want := range expect {
		if len(want) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.read(j, p, want, mail); err != nil {
				report(err)
			}
		}()
	}
	for c, ps := range parts {
		if len(ps) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.runChunk(ctx, p, c, ps, mail[c], abort, vec); err != nil {
				report(err)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return e.err()
	}
	e.runs.Add(1)
	return nil
}

// frameKey names one transfer a peer sends this node.
type frameKey struct{ step, chunk int }

// frame is a transfer received.
type frame struct {
	from, step int
	data       []float32
}

// chunkStep is this node's part of one chunk in one step.
type chunkStep struct {
	step         int
	sends, recvs []reduceplan.Transfer
}

// runChunk moves chunk c through this node's steps: in each, it sends
// (after BeforeSend) what the step sends, then waits for and applies, in
// plan order, what the step receives. A node never sends and receives one
// chunk in one step (Verify), so the sends read the chunk as the earlier
// steps left it; they are written before the receives change it.
func (e *Exchange) runChunk(ctx context.Context, p *reduceplan.Plan, c int, steps []chunkStep, mail <-chan frame, abort <-chan struct{}, vec []float32) error {
	r := p.Chunks[c]
	dst := vec[r.Off : r.Off+r.Len]
	early := map[[2]int][]float32{} // (from, step) -> data that came before its step
	for _, st := range steps {
		if len(st.sends) > 0 {
			if e.cfg.BeforeSend != nil {
				e.cfg.BeforeSend(ctx, st.step)
			}
			for _, t := range st.sends {
				if err := e.send(t.To, st.step, p, t, vec); err != nil {
					return err
				}
			}
		}
		if len(st.recvs) == 0 {
			continue
		}
		for {
			missing := 0
			for _, t := range st.recvs {
				if _, ok := early[[2]int{t.From, st.step}]; !ok {
					missing++
				}
			}
			if missing == 0 {
				break
			}
			select {
			case f := <-mail:
				early[[2]int{f.from, f.step}] = f.data
			case <-abort:
				return e.err()
			}
		}
		for _, t := range st.recvs {
			k := [2]int{t.From, st.step}
			t.Op.Apply(dst, early[k])
			delete(early, k)
		}
	}
	return nil
}

// read takes from peer j the frames this node expects of it in this
// exchange (any order: its chunks progress independently) and hands each
// to its chunk. A frame of another exchange, step or chunk than expected,
// or one sent twice, fails the exchange.
func (e *Exchange) read(j int, p *reduceplan.Plan, want map[frameKey]bool, mail []chan frame) error {
	c := e.in[j]
	var h [headerSize]byte
	for left := len(want); left > 0; left-- {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return fmt.Errorf("allreduce: node %d: receive from node %d: %v", e.cfg.Self, j, err)
		}
		seq := binary.LittleEndian.Uint64(h[:])
		gs, gc, gl := binary.LittleEndian.Uint32(h[8:]), binary.LittleEndian.Uint32(h[12:]), binary.LittleEndian.Uint32(h[16:])
		k := frameKey{int(gs), int(gc)}
		if seq != e.seq || !want[k] || int(gl) != p.Chunks[k.chunk].Len {
			return fmt.Errorf("allreduce: node %d: from node %d got exchange %d step %d chunk %d of %d elements, which it does not expect (exchange %d)",
				e.cfg.Self, j, seq, gs, gc, gl, e.seq)
		}
		want[k] = false // a second copy is refused
		b := make([]byte, 4*gl)
		if _, err := io.ReadFull(c, b); err != nil {
			return fmt.Errorf("allreduce: node %d: receive step %d from node %d: %v", e.cfg.Self, gs, j, err)
		}
		mail[k.chunk] <- frame{from: j, step: k.step, data: wire.AsFloats(b)}
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

func (e *Exchange) send(j, step int, p *reduceplan.Plan, t reduceplan.Transfer, vec []float32) error {
	r := p.Chunks[t.Chunk]
	var h [headerSize]byte
	binary.LittleEndian.PutUint64(h[:], e.seq)
	binary.LittleEndian.PutUint32(h[8:], uint32(step))
	binary.LittleEndian.PutUint32(h[12:], uint32(t.Chunk))
	binary.LittleEndian.PutUint32(h[16:], uint32(r.Len))
	bufs := net.Buffers{h[:], wire.AsBytes(vec[r.Off : r.Off+r.Len])}
	e.outMu[j].Lock()
	_, err := bufs.WriteTo(e.out[j])
	e.outMu[j].Unlock()
	if err != nil {
		return fmt.Errorf("allreduce: node %d: send step %d to node %d: %v", e.cfg.Self, step, j, err)
	}
	e.sent[j].Add(4 * int64(r.Len))
	return nil
}
