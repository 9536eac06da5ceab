package role

import (
	"context"
	"fmt"
	"time"

	"github.com/kelpie/kelpie/core/diverge"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

// reportDivergence tells the coordinator that training diverged (here, or
// at the server whose answer said so) and ends the role without an error:
// restarting it would only diverge again. The report is retried while the
// coordinator is unreachable.
func reportDivergence(ctx context.Context, coord coordinatorpb.CoordinatorClient, o Options, d *diverge.Error) error {
	log := o.log()
	log.Error("training diverged", "at", d.Node, "iteration", d.Iteration, "what", d.What, "value", diverge.FormatValue(d.Value))
	req := &coordinatorpb.DivergedRequest{Job: o.Job, Node: o.Node, Divergence: &coordinatorpb.Divergence{
		Node: d.Node, Iteration: d.Iteration, What: d.What, Value: diverge.FormatValue(d.Value), Detail: d.Detail}}
	wait := 100 * time.Millisecond
	for {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, err := coord.Diverged(rctx, req)
		cancel()
		if err == nil {
			return nil
		}
		log.Warn("divergence report failed; retrying", "err", err, "in", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return fmt.Errorf("worker %s: %v (not reported: %v)", o.Node, d, err)
		}
		wait = min(2*wait, 5*time.Second)
	}
}
