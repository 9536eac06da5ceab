package coordinator

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/kelpiepb"
)

// FuzzRequests decodes arbitrary bytes as each Coordinator request (as
// gRPC would) and hands the result to its handler on a started job: no
// request, however malformed, may panic the scheduler or leave a handler
// blocked (blocking calls get a context that has ended).
func FuzzRequests(f *testing.F) {
	seed := func(rpc byte, m proto.Message) {
		b, _ := proto.Marshal(m)
		f.Add(rpc, b)
	}
	seed(0, &kelpiepb.RegisterRequest{Job: "elastic", Node: "worker-1", Role: kelpiepb.Role_ROLE_WORKER})
	seed(0, &kelpiepb.RegisterRequest{Job: "elastic", Node: "server-0", Role: kelpiepb.Role_ROLE_SERVER, Addr: "127.0.0.1:9"})
	seed(1, &kelpiepb.ReadyRequest{Job: "elastic", Node: "worker-0"})
	seed(2, &kelpiepb.ProgressReport{Job: "elastic", Node: "worker-0", Iteration: 3, BptSeconds: []float64{0.1, -1}, Comm: []*kelpiepb.CommSample{{Server: 9}}})
	seed(3, &kelpiepb.DoneRequest{Job: "elastic", Node: "worker-1", Left: true})
	seed(4, &kelpiepb.ResultRequest{Job: "elastic", Node: "worker-0"})
	seed(5, &kelpiepb.FetchShardRequest{Job: "elastic", Node: "worker-0"})
	seed(6, &kelpiepb.ReportShardRequest{Job: "elastic", Node: "worker-0", Ids: []int64{0, -1, 1 << 40}, Release: true})
	seed(7, &kelpiepb.DivergedRequest{Job: "elastic", Node: "worker-0", Divergence: &kelpiepb.Divergence{Node: "server-0", What: "loss"}})
	f.Fuzz(func(t *testing.T, rpc byte, data []byte) {
		c, _ := startedJob(t)
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		ctx := context.Background()
		var err error
		switch rpc % 8 {
		case 0:
			var r kelpiepb.RegisterRequest
			if err = proto.Unmarshal(data, &r); err == nil {
				_, _ = c.Register(ctx, &r)
			}
		case 1:
			var r kelpiepb.ReadyRequest
			if err = proto.Unmarshal(data, &r); err == nil {
				_, _ = c.Ready(ended, &r)
			}
		case 2:
			var r kelpiepb.ProgressReport
			if err = proto.Unmarshal(data, &r); err == nil {
				_, _ = c.Progress(ctx, &r)
			}
		case 3:
			var r kelpiepb.DoneRequest
			if err = proto.Unmarshal(data, &r); err == nil {
				_, _ = c.Done(ended, &r)
			}
		case 4:
			var r kelpiepb.ResultRequest
			if err = proto.Unmarshal(data, &r); err == nil {
				_, _ = c.Result(ctx, &r)
			}
		case 5:
			var r kelpiepb.FetchShardRequest
			if err = proto.Unmarshal(data, &r); err == nil {
				_, _ = c.FetchShard(ctx, &r)
			}
		case 6:
			var r kelpiepb.ReportShardRequest
			if err = proto.Unmarshal(data, &r); err == nil {
				_, _ = c.ReportShard(ctx, &r)
			}
		case 7:
			var r kelpiepb.DivergedRequest
			if err = proto.Unmarshal(data, &r); err == nil {
				_, _ = c.Diverged(ctx, &r)
			}
		}
		_ = err // undecodable bytes are gRPC's to refuse
	})
}
