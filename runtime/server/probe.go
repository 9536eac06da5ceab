package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/proto/pspb"
)

// MaxProbeEcho is the most data a probe's round trip may carry each way.
const MaxProbeEcho = 1 << 20

// Probe answers a worker's probe round trip (kelpie job probe): it echoes
// the data after taking the server's lock, as a request does, with the
// slowness this server is told to have (its injected delays, its capped
// link) on the way in and out, and says how long the server itself held
// the round trip — the rest of what the worker measures is the link's.
func (s *Server) Probe(_ context.Context, req *pspb.ProbeEcho) (*pspb.ProbeEcho, error) {
	if len(req.Data) > MaxProbeEcho {
		return nil, status.Errorf(codes.InvalidArgument, "server %s: probe: %d bytes, at most %d", s.cfg.Name, len(req.Data), MaxProbeEcho)
	}
	t0 := time.Now()
	s.inject(len(req.Data), inbound)
	s.mu.Lock()
	//lint:ignore SA2001 the lock is the point: a probe waits behind the server's requests as theirs do
	s.mu.Unlock()
	out := &pspb.ProbeEcho{Data: req.Data}
	s.inject(len(req.Data), outbound)
	out.ServerSeconds = time.Since(t0).Seconds()
	return out, nil
}
