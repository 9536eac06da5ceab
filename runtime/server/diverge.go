package server

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/diverge"
	"github.com/kelpie/kelpie/proto/pspb"
)

// divergedLocked checks the parameters a push just updated (its blocks and
// rows) and returns the server's divergence, the first non-finite value it
// found, from then on: a diverged server answers every push with it, so the
// worker can tell the scheduler where and when the job diverged. The
// updates themselves flag a block that got a NaN or ±Inf (optim reports
// it), so only a flagged block is searched for the value. The caller holds
// s.mu.
func (s *Server) divergedLocked(req *pspb.PSRequest) error {
	if s.diverged != nil {
		return s.diverged
	}
	var found *diverge.Error
	for _, id := range req.Blocks {
		b := s.blocks[int(id)]
		if b == nil || !b.nonFinite {
			continue
		}
		if i := diverge.FirstNonFinite(b.vals); i >= 0 {
			found = &diverge.Error{Node: s.cfg.Name, Iteration: req.Progress, What: diverge.Parameters,
				Value: float64(b.vals[i]), Detail: fmt.Sprintf("block %d, element %d", id, i)}
			break
		}
	}
	if found == nil && len(req.RowKeys) > 0 {
		refs, _ := s.rowsOf(req.RowKeys) // checked already
		dim := s.rowDim()
		for k, r := range refs {
			if !r.b.nonFinite {
				continue
			}
			row := r.b.vals[r.row*dim : (r.row+1)*dim]
			if i := diverge.FirstNonFinite(row); i >= 0 {
				found = &diverge.Error{Node: s.cfg.Name, Iteration: req.Progress, What: diverge.Parameters,
					Value: float64(row[i]), Detail: fmt.Sprintf("row %d, element %d", req.RowKeys[k], i)}
				break
			}
		}
	}
	if found == nil {
		return nil
	}
	s.diverged = status.Error(codes.DataLoss, found.Error())
	return s.diverged
}
