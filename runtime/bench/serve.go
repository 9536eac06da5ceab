package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/server"
)

// PSServer is a parameter server set up for the benchmark: asp, and plain
// SGD with learning rate 1 (optim refuses a negative rate), so a push of -g
// adds g to the block: the server sums pushes, as ps-lite's benchmark
// server does, and the benchmark pushes -1s. It holds one
// dense block per benchmarked size; block i has sizes[i] bytes and starts
// at zero.
type PSServer struct {
	ps   *server.Server
	gs   *grpc.Server
	ep   *server.Endpoint
	lis  net.Listener
	done chan struct{}
}

// StartPS listens on addr ("127.0.0.1:0" for any port) and serves. With
// encrypt, framed TCP connections continue in TLS after their handshake
// (data_plane_encryption: on; it needs $KELPIE_CERT).
func StartPS(addr string, workers int, sizes []int, encrypt bool) (*PSServer, error) {
	if workers < 1 {
		return nil, fmt.Errorf("bench: parameter server for %d workers", workers)
	}
	ids := make([]int, workers)
	for i := range ids {
		ids[i] = i
	}
	ps, err := server.New(server.Config{
		Name:    "bench",
		Sync:    syncmodel.Config{Model: syncmodel.ASP},
		Optim:   optim.Config{Kind: optim.SGD, LR: 1},
		Workers: ids,
	})
	if err != nil {
		return nil, err
	}
	ps.Install(Table(sizes), 0, func(b blocks.Block) []float32 {
		// Zeros written, not just allocated: memory of its own (see touch).
		v := make([]float32, b.Floats())
		clear(v)
		return v
	})
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: %v", err)
	}
	// With $KELPIE_CERT (kelpie bench pushpull --mtls) the server speaks
	// mTLS and authorizes each call like a job's server, except that one
	// benchmark process plays every worker.
	trust, err := identity.ProcessServerOptions(func(self identity.Identity) identity.Policy {
		return func(id identity.Identity, _ string, _ proto.Message) error {
			if id.Role != identity.RoleWorker || id.Job != self.Job {
				return fmt.Errorf("bench: %s is not a worker of %s", id, self.Job)
			}
			return nil
		}
	}, nil)
	if err != nil {
		lis.Close()
		return nil, err
	}
	// gRPC and the framed transport on one port, and a Unix socket, as a
	// job's server has them.
	framed := server.Framed{Unix: server.UnixPath("", "bench"), Credentials: framing.SharedSecret(identity.ProcessJobSecret())}
	if encrypt {
		if framed.TLS, _, err = identity.ProcessFramedTLS(); err != nil {
			lis.Close()
			return nil, err
		}
	}
	ep, err := ps.Listen(lis, framed)
	if err != nil {
		lis.Close()
		return nil, err
	}
	s := &PSServer{ps: ps, gs: grpc.NewServer(append(psclient.ServerOptions(), trust...)...), ep: ep, lis: lis, done: make(chan struct{})}
	pspb.RegisterParameterServerServer(s.gs, ps)
	go func() {
		defer close(s.done)
		_ = s.gs.Serve(ep.GRPC())
	}()
	return s, nil
}

// Table is the block table of a benchmark server: block i holds sizes[i]
// bytes, all on server 0 (each server process is told it is server 0 of
// its own table; workers name block i on every server).
func Table(sizes []int) blocks.Table {
	t := blocks.Table{Version: 1, Servers: 1}
	for i, n := range sizes {
		t.Blocks = append(t.Blocks, blocks.Block{ID: i, Tensor: i, Length: int64(n / 4), Cols: 1})
		t.ServerOf = append(t.ServerOf, 0)
	}
	return t
}

// Addr is the address the server listens on.
func (s *PSServer) Addr() string { return s.lis.Addr().String() }

// Snapshot copies the server's blocks (to check that pushes were summed).
func (s *PSServer) Snapshot() map[int][]float32 { return s.ps.Snapshot() }

// Stop ends the server, waiting at most two seconds for streams to finish.
func (s *PSServer) Stop() {
	stopped := make(chan struct{})
	go func() { s.gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		s.gs.Stop()
	}
	s.ep.Close()
	<-s.done
}

// The raw TCP baseline speaks a minimal framing. A request is an 8-byte
// header, [up uint32 LE][down uint32 LE], followed by up payload bytes; the
// reply is a 4-byte header [down uint32 LE] followed by down bytes. A push
// is (size, 0), answered by a 4-byte ack; a pull (0, size); a pushpull
// (size, size).
const (
	rawReqHeader   = 8
	rawReplyHeader = 4
	rawMaxPayload  = 1 << 30
	rawBuffer      = 256 << 10 // same as the gRPC read/write buffers
)

// RawServer is the raw ping-pong server of the baseline: the same protocol
// on a TCP port and on a Unix socket beside it (RawUnixPath), so that rows
// over kelpie's Unix socket have a raw baseline over a Unix socket too.
type RawServer struct {
	lis  net.Listener
	unix net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartRaw listens on addr (TCP) and on RawUnixPath of it, and answers raw
// requests until Stop.
func StartRaw(addr string) (*RawServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: %v", err)
	}
	path := RawUnixPath(lis.Addr().String())
	_ = os.Remove(path) // a crashed run's
	ulis, err := net.Listen("unix", path)
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("bench: %v", err)
	}
	s := &RawServer{lis: lis, unix: ulis, conns: map[net.Conn]struct{}{}}
	s.wg.Add(2)
	go s.accept(lis)
	go s.accept(ulis)
	return s, nil
}

// RawUnixPath is the Unix socket of the raw server listening on the TCP
// address addr (both on this host).
func RawUnixPath(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return filepath.Join(os.TempDir(), "kelpie-bench-raw-"+port+".sock")
}

// Addr is the address the server listens on.
func (s *RawServer) Addr() string { return s.lis.Addr().String() }

func (s *RawServer) accept(lis net.Listener) {
	defer s.wg.Done()
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.conns == nil { // stopping
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *RawServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	framing.Tune(c) // as kelpie's server does its connections
	r := bufio.NewReaderSize(c, rawBuffer)
	var hdr [rawReqHeader]byte
	var in, out []byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		up := binary.LittleEndian.Uint32(hdr[0:])
		down := binary.LittleEndian.Uint32(hdr[4:])
		if up > rawMaxPayload || down > rawMaxPayload {
			return
		}
		if int(up) > len(in) {
			in = make([]byte, up)
		}
		if _, err := io.ReadFull(r, in[:up]); err != nil {
			return
		}
		if n := rawReplyHeader + int(down); n > len(out) {
			out = touch(make([]byte, n))
		}
		binary.LittleEndian.PutUint32(out, down)
		if _, err := c.Write(out[:rawReplyHeader+int(down)]); err != nil {
			return
		}
	}
}

// touch fills b with a non-zero pattern and returns it. A fresh large
// allocation is the kernel's zero page until written: sending it, the
// copy reads one page over and over from cache, which no real tensor
// does. Every payload the benchmark sends, kelpie's (the parameters, the
// pushed gradient) and the raw baseline's, lies in memory of its own.
func touch(b []byte) []byte {
	for i := range b {
		b[i] = byte(i) | 1
	}
	return b
}

// Stop closes the listener and every connection, and waits for their
// goroutines.
func (s *RawServer) Stop() {
	s.lis.Close()
	s.unix.Close() // removes the socket file
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}

// ServerKind names what a server process runs.
type ServerKind string

// Server process kinds.
const (
	KindPS  ServerKind = "ps"  // a kelpie parameter server
	KindRaw ServerKind = "raw" // the raw baseline (TCP, and a Unix socket beside it)
)

// addrLine prefixes the line a server process prints once it listens.
const addrLine = "ADDR "

// RunServer is the body of a benchmark server process (the hidden
// `kelpie bench serve` command). args are its flags:
//
//	--kind ps|raw  --listen HOST:PORT  --workers N  --sizes B,B,...  --cpu C
//	[--encrypt] [--cpuprofile FILE]
//
// It pins itself to CPU C when C >= 0, prints "ADDR host:port" on stdout
// once it listens, and serves until ctx ends or stdin reaches EOF (the
// parent closes it, or dies).
func RunServer(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	kind := fs.String("kind", string(KindPS), "ps or raw")
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	workers := fs.Int("workers", 1, "workers in the parameter server's barrier")
	sizeList := fs.String("sizes", "", "block sizes in bytes, comma-separated")
	cpu := fs.Int("cpu", -1, "pin the process to this CPU (-1: do not pin)")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the process to this file")
	encrypt := fs.Bool("encrypt", false, "encrypt framed TCP connections (needs $KELPIE_CERT)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("bench serve: %v", err)
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			return fmt.Errorf("bench serve: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("bench serve: %v", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *cpu >= 0 {
		restore, err := pinProcess(*cpu)
		if err != nil {
			return err
		}
		defer restore()
	}
	var addr string
	var stop func()
	switch ServerKind(*kind) {
	case KindPS:
		sizes, err := parseSizes(*sizeList)
		if err != nil {
			return err
		}
		s, err := StartPS(*listen, *workers, sizes, *encrypt)
		if err != nil {
			return err
		}
		addr, stop = s.Addr(), s.Stop
	case KindRaw:
		s, err := StartRaw(*listen)
		if err != nil {
			return err
		}
		addr, stop = s.Addr(), s.Stop
	default:
		return fmt.Errorf("bench serve: unknown kind %q (want ps or raw)", *kind)
	}
	defer stop()
	if _, err := fmt.Fprintf(stdout, "%s%s\n", addrLine, addr); err != nil {
		return err
	}
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-ctx.Done():
	case <-eof:
	}
	return nil
}

func parseSizes(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("bench serve: --sizes is empty")
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || n%4 != 0 {
			return nil, fmt.Errorf("bench serve: size %q: want a positive multiple of 4 bytes", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func formatSizes(sizes []int) string {
	f := make([]string, len(sizes))
	for i, n := range sizes {
		f[i] = strconv.Itoa(n)
	}
	return strings.Join(f, ",")
}
