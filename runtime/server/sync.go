package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/proto/pspb"
)

// SetSync switches the server's synchronization model live (e.g. BSP →
// SSP s=3). Gradients summed for the current version under an aggregating
// model are applied before the switch; delayed pulls that the new pull
// condition allows are answered at once.
func (s *Server) SetSync(_ context.Context, req *pspb.SyncSettings) (*pspb.SetSyncResponse, error) {
	c := job.SyncFrom(req)
	if err := c.Validate(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "server %s: %v", s.cfg.Name, err)
	}
	var send after
	s.mu.Lock()
	s.awaitQuiet()
	wasAgg := s.cfg.Sync.Aggregate()
	if wasAgg && !c.Aggregate() {
		s.commitPartial()
	}
	s.cfg.Sync = c
	if c.Aggregate() && !wasAgg {
		for _, b := range s.blocks {
			b.acc = make([]float32, len(b.vals))
			if b.meta.Sparse {
				b.mark = make([]bool, b.meta.Length)
			}
		}
	}
	rel := s.engine.SetConfig(c)
	s.release(rel, &send)
	s.mu.Unlock()
	send.run()
	return &pspb.SetSyncResponse{Released: int64(len(rel))}, nil
}

// commitPartial applies the gradients summed so far for the current version
// (leaving an aggregating model with a version half pushed) and frees the
// sums.
func (s *Server) commitPartial() {
	opt := s.cfg.Optim.At(s.engine.VTrain())
	for _, b := range s.blocks {
		if b.acc != nil && b.dirty {
			s.step(b, opt)
		}
		b.acc, b.mark, b.touched = nil, nil, nil
	}
}
