package identity

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kelpie/kelpie/proto/kelpiepb"
)

// guarded are the messages the node plane's guards check, by the method
// they arrive on.
var guarded = []struct {
	method string
	new    func() proto.Message
}{
	{"/kelpie.v1.Coordinator/Register", func() proto.Message { return &kelpiepb.RegisterRequest{} }},
	{"/kelpie.v1.Coordinator/FetchShard", func() proto.Message { return &kelpiepb.FetchShardRequest{} }},
	{"/kelpie.v1.Coordinator/ReportShard", func() proto.Message { return &kelpiepb.ReportShardRequest{} }},
	{"/kelpie.v1.Coordinator/Progress", func() proto.Message { return &kelpiepb.ProgressReport{} }},
	{"/kelpie.v1.Coordinator/Done", func() proto.Message { return &kelpiepb.DoneRequest{} }},
	{"/kelpie.v1.Coordinator/Diverged", func() proto.Message { return &kelpiepb.DivergedRequest{} }},
	{"/kelpie.v1.Agent/Connect", func() proto.Message { return &kelpiepb.AgentMessage{} }},
	{"/kelpie.v1.ParameterServer/Push", func() proto.Message { return &kelpiepb.PSRequest{} }},
	{"/kelpie.v1.ParameterServer/Migrate", func() proto.Message { return &kelpiepb.MigrateRequest{} }},
	{"/kelpie.v1.AgentPeer/Forward", func() proto.Message { return &kelpiepb.ForwardRequest{} }},
}

// FuzzPolicies decodes arbitrary bytes as each message a guard checks and
// runs the scheduler's policy, a server's and an agent's peer service's on
// it for worker-0 of job
// a: no input may panic, and whatever a policy allows names no job, node,
// role or pushing worker but the caller's in its top two levels (one for a
// divergence report) — checked
// against a plain walk of the message (the reference).
func FuzzPolicies(f *testing.F) {
	seed := func(i int, m proto.Message) {
		b, _ := proto.Marshal(m)
		f.Add(byte(i), b)
	}
	seed(0, &kelpiepb.RegisterRequest{Job: "a", Node: "worker-0", Role: kelpiepb.Role_ROLE_WORKER})
	seed(0, &kelpiepb.RegisterRequest{Job: "a", Node: "server-0", Role: kelpiepb.Role_ROLE_SERVER})
	seed(1, &kelpiepb.FetchShardRequest{Job: "a", Node: "worker-1"})
	seed(2, &kelpiepb.ReportShardRequest{Job: "b", Node: "worker-0", Ids: []int64{1, 2}})
	seed(4, &kelpiepb.DoneRequest{Job: "a", Node: "worker-0"})
	seed(5, &kelpiepb.DivergedRequest{Job: "a", Node: "worker-0", Divergence: &kelpiepb.Divergence{Node: "server-0", What: "loss"}})
	seed(6, &kelpiepb.AgentMessage{Body: &kelpiepb.AgentMessage_Hello{Hello: &kelpiepb.AgentHello{Job: "a", Node: "worker-1"}}})
	seed(6, &kelpiepb.AgentMessage{Body: &kelpiepb.AgentMessage_Refusal{Refusal: &kelpiepb.NodeRefusal{CallerJob: "b", Method: "x"}}})
	seed(7, &kelpiepb.PSRequest{Worker: 1, Op: kelpiepb.Op_OP_PUSH})
	seed(8, &kelpiepb.MigrateRequest{})
	seed(9, &kelpiepb.ForwardRequest{Job: "a", Node: "worker-1", Command: &kelpiepb.ActionCommand{ActionId: "a-1", Kind: "ADJUST_BS"}})
	self, server, peer := Node("a", "worker-0"), ServerPolicy(Node("a", "server-0")), AgentPeerPolicy(Node("a", "worker-1"))
	f.Fuzz(func(t *testing.T, which byte, data []byte) {
		g := guarded[int(which)%len(guarded)]
		msg := g.new()
		if proto.Unmarshal(data, msg) != nil {
			return
		}
		for name, policy := range map[string]Policy{"scheduler": SchedulerPolicy, "server": server, "agent peer": peer} {
			if policy(self, g.method, msg) != nil {
				continue
			}
			depth := 2
			if _, ok := msg.(*kelpiepb.DivergedRequest); ok {
				// A divergence names where it was seen, not who reports
				// it (the coordinator checks that node is of the job).
				depth = 1
			}
			if why := foreignClaim(self, msg.ProtoReflect(), depth); why != "" {
				t.Fatalf("the %s policy let %s call %s with %s (%v)", name, self, g.method, why, msg)
			}
			if r, ok := msg.(*kelpiepb.PSRequest); ok && r.GetWorker() != 0 {
				t.Fatalf("the %s policy let %s push as worker %d", name, self, r.GetWorker())
			}
		}
	})
}

// foreignClaim is the reference: the first job, node or role field in m's
// top depth levels that is neither empty nor id's, described; "" if none.
func foreignClaim(id Identity, m protoreflect.Message, depth int) string {
	var why string
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len() && why == ""; i++ {
		fd := fields.Get(i)
		if !m.Has(fd) || fd.IsList() || fd.IsMap() {
			continue
		}
		v := m.Get(fd)
		switch {
		case fd.Kind() == protoreflect.StringKind && fd.Name() == "job" && v.String() != id.Job,
			fd.Kind() == protoreflect.StringKind && fd.Name() == "node" && v.String() != id.Node:
			why = string(fd.FullName()) + "=" + v.String()
		case fd.Kind() == protoreflect.EnumKind && fd.Name() == "role" && fd.Enum().FullName() == "kelpie.v1.Role" &&
			kelpiepb.Role(v.Enum()) != kelpiepb.Role_ROLE_WORKER:
			why = string(fd.FullName()) + "=" + kelpiepb.Role(v.Enum()).String()
		case fd.Kind() == protoreflect.MessageKind && depth > 1:
			why = foreignClaim(id, v.Message(), depth-1)
		}
	}
	return why
}
