package allreduce

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"

	"github.com/kelpie/kelpie/runtime/framing"
)

// Security is how the workers of a group prove themselves to each other,
// as on the parameter-server data plane (runtime/framing): every
// connection starts with runtime/framing's handshake, in which both ends prove
// the job's data-plane secret; with TLS configurations
// (data_plane_encryption: on) it continues in TLS with both ends' node
// certificates, and the certificate must then name exactly the worker the
// peer claims to be. A refused connection is logged with its reason.
type Security struct {
	// Credentials prove the job (nil: framing.SharedSecret(nil), the
	// job without a secret).
	Credentials framing.Credentials
	// ServerTLS and ClientTLS (both or neither) encrypt: the accepting and
	// the dialling end's configurations (identity.Credentials.PeerTLS).
	ServerTLS, ClientTLS *tls.Config
	// PeerNode names the node a verified TLS peer's certificate identifies
	// (identity.TLSPeer); required with TLS.
	PeerNode func(tls.ConnectionState) (string, error)
	// Log receives refusals (nil: not logged): at most 5 a second with
	// bursts of 20, the next line saying how many were left out, so a
	// flood of strangers cannot fill the node's log.
	Log *slog.Logger

	limitOnce  sync.Once
	limit      *rate.Limiter
	suppressed atomic.Int64
}

// secured is a connection after the security handshake: the stream the
// exchange continues on and, with TLS, the node its certificate names.
type secured struct {
	conn net.Conn
	node string // "" without TLS
}

func (s *Security) creds() framing.Credentials {
	if s.Credentials == nil {
		return framing.SharedSecret(nil)
	}
	return s.Credentials
}

// client runs the dialling end's handshake on c.
func (s *Security) client(c net.Conn) (secured, error) {
	framing.Tune(c)
	tc := framing.NewConn(c)
	if _, err := framing.ClientHandshake(tc, s.creds(), s.ClientTLS); err != nil {
		return secured{}, err
	}
	return s.finish(tc)
}

// server runs the accepting end's handshake on c.
func (s *Security) server(c net.Conn) (secured, error) {
	framing.Tune(c)
	tc := framing.NewConn(c)
	if err := framing.ServerHandshake(tc, s.creds(), s.ServerTLS, framing.Hello{}); err != nil {
		return secured{}, err
	}
	return s.finish(tc)
}

func (s *Security) finish(tc *framing.Conn) (secured, error) {
	conn, err := tc.Stream()
	if err != nil {
		return secured{}, err
	}
	out := secured{conn: conn}
	if st, ok := tc.TLSState(); ok {
		if s.PeerNode == nil {
			return secured{}, fmt.Errorf("allreduce: an encrypted peer and no way to read its certificate's node")
		}
		if out.node, err = s.PeerNode(st); err != nil {
			return secured{}, err
		}
	}
	return out, nil
}

// checkNode refuses a TLS peer whose certificate names another node than
// the one it claims to be (or the one this end dialled).
func checkNode(certNode, want string) error {
	if certNode != "" && certNode != want {
		return fmt.Errorf("allreduce: the peer's certificate names %s, but it is taken for %s", certNode, want)
	}
	return nil
}

func (s *Security) refused(who string, remote net.Addr, err error) {
	if s.Log == nil {
		return
	}
	s.limitOnce.Do(func() { s.limit = rate.NewLimiter(5, 20) })
	if !s.limit.Allow() {
		s.suppressed.Add(1)
		return
	}
	s.Log.Warn("allreduce: refused a peer connection", "peer", who, "remote", remote.String(), "reason", err,
		"left_out", s.suppressed.Swap(0))
}
