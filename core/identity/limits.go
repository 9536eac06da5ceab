package identity

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Limits bound what one peer of a node-plane gRPC server (the scheduler's,
// a parameter server's, an agent's peer service) can make it hold, before
// and after it proved who it is: the TLS handshake's deadline (a connection
// that has not finished it is closed), the streams one connection may have
// open at once, the size of one received message, and how often a client
// may ping. Without them grpc holds a half-open connection for 120 s and
// allows 2^32 streams a connection, each with its own goroutine.
type Limits struct {
	// HandshakeTimeout closes a connection that has not completed its TLS
	// handshake (and HTTP/2 preface) in time (default 10 s).
	HandshakeTimeout time.Duration
	// MaxStreams is the streams one connection may have open at once
	// (default 256); grpc refuses the others (REFUSED_STREAM) before a
	// handler, a goroutine or a buffer exists for them.
	MaxStreams uint32
	// MaxRecvBytes bounds one received message (default 4 MiB); grpc
	// refuses a longer one from its length prefix, before reading it.
	MaxRecvBytes int
	// PingMinTime is the shortest interval between a client's keepalive
	// pings: a client pinging faster is sent GOAWAY (default 20 s).
	PingMinTime time.Duration
	// IdleTimeout closes a connection with no stream for that long
	// (default 15 min; the client reconnects when it next calls).
	IdleTimeout time.Duration
	// PingEvery and PingTimeout: the server pings a connection idle for
	// PingEvery and closes it when no answer comes within PingTimeout
	// (defaults 1 min and 20 s), so a peer that vanished does not hold
	// its streams for ever.
	PingEvery, PingTimeout time.Duration
}

// DefaultMaxRecvBytes bounds one message on a node plane that moves no
// tensors (the scheduler's; an agent's peer service).
const DefaultMaxRecvBytes = 4 << 20

// DefaultLimits are the node plane's defaults.
func DefaultLimits() Limits {
	return Limits{HandshakeTimeout: 10 * time.Second, MaxStreams: 256, MaxRecvBytes: DefaultMaxRecvBytes,
		PingMinTime: 20 * time.Second, IdleTimeout: 15 * time.Minute, PingEvery: time.Minute, PingTimeout: 20 * time.Second}
}

// orDefault fills the zero fields of l from DefaultLimits.
func (l Limits) orDefault() Limits {
	d := DefaultLimits()
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = d.HandshakeTimeout
	}
	if l.MaxStreams == 0 {
		l.MaxStreams = d.MaxStreams
	}
	if l.MaxRecvBytes <= 0 {
		l.MaxRecvBytes = d.MaxRecvBytes
	}
	if l.PingMinTime <= 0 {
		l.PingMinTime = d.PingMinTime
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.PingEvery <= 0 {
		l.PingEvery = d.PingEvery
	}
	if l.PingTimeout <= 0 {
		l.PingTimeout = d.PingTimeout
	}
	return l
}

// ServerOptions are the grpc server options of l (zero fields: defaults).
func (l Limits) ServerOptions() []grpc.ServerOption {
	l = l.orDefault()
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.MaxConcurrentStreams(l.MaxStreams),
		grpc.MaxRecvMsgSize(l.MaxRecvBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.PingMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.IdleTimeout, Time: l.PingEvery, Timeout: l.PingTimeout}),
	}
}
