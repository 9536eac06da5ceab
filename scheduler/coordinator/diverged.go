package coordinator

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/textclean"
)

// Diverged records that a job's training diverged (a non-finite loss or
// parameter) and fails the job with it; the first report wins. The reason
// is also kept as a value: Divergence.
func (c *Coordinator) Diverged(_ context.Context, r *coordinatorpb.DivergedRequest) (*coordinatorpb.DivergedResponse, error) {
	j, err := c.job(r.Job)
	if err != nil {
		return nil, err
	}
	d := r.GetDivergence()
	if d == nil || d.Node == "" || d.What == "" {
		return nil, status.Errorf(codes.InvalidArgument, "job %s: a divergence report from %q must name its node and what diverged", r.Job, r.Node)
	}
	if len(d.Node) > 128 || len(d.What) > 64 || len(d.Value) > 64 || len(d.Detail) > 1024 {
		return nil, status.Errorf(codes.InvalidArgument, "job %s: divergence report from %q is too long", r.Job, r.Node)
	}
	// Any member of the job may report where training diverged: its own
	// loss or gradient, or a server whose answer said it diverged. A node
	// that is not a member of the job is nobody's to blame.
	j.mu.Lock()
	_, reporter := j.nodes[r.Node]
	_, seenAt := j.nodes[d.Node]
	j.mu.Unlock()
	if !reporter {
		return nil, status.Errorf(codes.NotFound, "job %s has no registered node %q", r.Job, r.Node)
	}
	if d.Node != r.Node && (!seenAt || !strings.HasPrefix(d.Node, "server-")) {
		return nil, status.Errorf(codes.InvalidArgument, "job %s: %s reports a divergence at %q, which is neither itself nor a server of the job", r.Job, r.Node, d.Node)
	}
	// What, value and detail are the node's words, shown in the job's
	// error and result: stripped of control characters (the lengths are
	// bounded above).
	d = proto.CloneOf(d)
	d.Reporter = r.Node
	d.What, d.Value, d.Detail = textclean.Clean(d.What, 0), textclean.Clean(d.Value, 0), textclean.Clean(d.Detail, 0)
	j.Diverge(d)
	return &coordinatorpb.DivergedResponse{}, nil
}

// Diverge fails the job as diverged, unless it is already over.
func (j *Job) Diverge(d *coordinatorpb.Divergence) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil || j.over() {
		return
	}
	j.diverged = d
	j.err = fmt.Errorf("diverged: non-finite %s (%s) at %s, iteration %d", d.What, d.Value, d.Node, d.Iteration)
	close(j.failed)
}

// Divergence is where and how the job diverged, or nil.
func (j *Job) Divergence() *coordinatorpb.Divergence {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.diverged
}
