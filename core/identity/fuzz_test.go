package identity

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/proto/pspb"
)

// guarded are the messages the node plane's guards check, by the method
// they arrive on.
var guarded = []struct {
	method string
	new    func() proto.Message
}{
	{"/kelpie.v1.Coordinator/Register", func() proto.Message { return &coordinatorpb.RegisterRequest{} }},
	{"/kelpie.v1.Coordinator/FetchShard", func() proto.Message { return &coordinatorpb.FetchShardRequest{} }},
	{"/kelpie.v1.Coordinator/ReportShard", func() proto.Message { return &coordinatorpb.ReportShardRequest{} }},
	{"/kelpie.v1.Coordinator/Progress", func() proto.Message { return &coordinatorpb.ProgressReport{} }},
	{"/kelpie.v1.Coordinator/Done", func() proto.Message { return &coordinatorpb.DoneRequest{} }},
	{"/kelpie.v1.Coordinator/Diverged", func() proto.Message { return &coordinatorpb.DivergedRequest{} }},
	{"/kelpie.v1.Agent/Connect", func() proto.Message { return &agentpb.AgentMessage{} }},
	{"/kelpie.v1.ParameterServer/Push", func() proto.Message { return &pspb.PSRequest{} }},
	{"/kelpie.v1.ParameterServer/Migrate", func() proto.Message { return &pspb.MigrateRequest{} }},
	{"/kelpie.v1.AgentPeer/Forward", func() proto.Message { return &agentpb.ForwardRequest{} }},
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
	seed(0, &coordinatorpb.RegisterRequest{Job: "a", Node: "worker-0", Role: coordinatorpb.Role_ROLE_WORKER})
	seed(0, &coordinatorpb.RegisterRequest{Job: "a", Node: "server-0", Role: coordinatorpb.Role_ROLE_SERVER})
	seed(1, &coordinatorpb.FetchShardRequest{Job: "a", Node: "worker-1"})
	seed(2, &coordinatorpb.ReportShardRequest{Job: "b", Node: "worker-0", Ids: []int64{1, 2}})
	seed(4, &coordinatorpb.DoneRequest{Job: "a", Node: "worker-0"})
	seed(5, &coordinatorpb.DivergedRequest{Job: "a", Node: "worker-0", Divergence: &coordinatorpb.Divergence{Node: "server-0", What: "loss"}})
	seed(6, &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Hello{Hello: &agentpb.AgentHello{Job: "a", Node: "worker-1"}}})
	seed(6, &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Refusal{Refusal: &agentpb.NodeRefusal{CallerJob: "b", Method: "x"}}})
	seed(7, &pspb.PSRequest{Worker: 1, Op: pspb.Op_OP_PUSH})
	seed(8, &pspb.MigrateRequest{})
	seed(9, &agentpb.ForwardRequest{Job: "a", Node: "worker-1", Command: &agentpb.ActionCommand{ActionId: "a-1", Kind: "ADJUST_BS"}})
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
			if _, ok := msg.(*coordinatorpb.DivergedRequest); ok {
				// A divergence names where it was seen, not who reports
				// it (the coordinator checks that node is of the job).
				depth = 1
			}
			if why := foreignClaim(self, msg.ProtoReflect(), depth); why != "" {
				t.Fatalf("the %s policy let %s call %s with %s (%v)", name, self, g.method, why, msg)
			}
			if r, ok := msg.(*pspb.PSRequest); ok && r.GetWorker() != 0 {
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
			coordinatorpb.Role(v.Enum()) != coordinatorpb.Role_ROLE_WORKER:
			why = string(fd.FullName()) + "=" + coordinatorpb.Role(v.Enum()).String()
		case fd.Kind() == protoreflect.MessageKind && depth > 1:
			why = foreignClaim(id, v.Message(), depth-1)
		}
	}
	return why
}
