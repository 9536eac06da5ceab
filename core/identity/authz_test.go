package identity

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

func TestSchedulerPolicy(t *testing.T) {
	w0 := Node("a", "worker-0")
	s0 := Node("a", "server-0")
	const co = "/kelpie.v1.Coordinator/"
	for _, tt := range []struct {
		name   string
		id     Identity
		method string
		msg    proto.Message
		ok     bool
	}{
		{"fetch as itself", w0, co + "FetchShard", &coordinatorpb.FetchShardRequest{Job: "a", Node: "worker-0"}, true},
		{"fetch as worker-1", w0, co + "FetchShard", &coordinatorpb.FetchShardRequest{Job: "a", Node: "worker-1"}, false},
		{"fetch in job b", w0, co + "FetchShard", &coordinatorpb.FetchShardRequest{Job: "b", Node: "worker-0"}, false},
		{"report as worker-1", w0, co + "ReportShard", &coordinatorpb.ReportShardRequest{Job: "a", Node: "worker-1", Ids: []int64{1}}, false},
		{"server fetches", s0, co + "FetchShard", &coordinatorpb.FetchShardRequest{Job: "a", Node: "server-0"}, false},
		{"server calls Done", s0, co + "Done", nil, false},
		{"register as itself", s0, co + "Register", &coordinatorpb.RegisterRequest{Job: "a", Node: "server-0", Role: coordinatorpb.Role_ROLE_SERVER}, true},
		{"worker registers as a server", w0, co + "Register", &coordinatorpb.RegisterRequest{Job: "a", Node: "worker-0", Role: coordinatorpb.Role_ROLE_SERVER}, false},
		{"worker registers as server-0", w0, co + "Register", &coordinatorpb.RegisterRequest{Job: "a", Node: "server-0", Role: coordinatorpb.Role_ROLE_SERVER}, false},
		{"agent hello as itself", w0, "/kelpie.v1.Agent/Connect", &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Hello{Hello: &agentpb.AgentHello{Job: "a", Node: "worker-0", Role: coordinatorpb.Role_ROLE_WORKER}}}, true},
		{"agent hello as worker-1", w0, "/kelpie.v1.Agent/Connect", &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Hello{Hello: &agentpb.AgentHello{Job: "a", Node: "worker-1"}}}, false},
		{"operator registers", Operator("x"), co + "Register", nil, false},
		{"scheduler registers", Scheduler(), co + "Register", nil, false},
		{"operator reflection", Operator("x"), "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", nil, true},
		{"unknown service", w0, "/kelpie.v1.ParameterServer/Push", nil, false},
	} {
		err := SchedulerPolicy(tt.id, tt.method, tt.msg)
		if (err == nil) != tt.ok {
			t.Errorf("%s: %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestIdentityValidate(t *testing.T) {
	for _, id := range []Identity{Node("j", "worker-0"), Node("j", "server-12"), Scheduler(), Operator("ci.bot")} {
		if err := id.Validate(); err != nil {
			t.Errorf("%v: %v", id, err)
		}
		if id.String() == "anonymous" {
			t.Errorf("%v has no name", id)
		}
	}
	for _, id := range []Identity{Node("_", "worker-0"), Node("j", "worker-x"), Node("j", "foo-1"), {Role: RoleScheduler, Node: "s", Job: "j"}} {
		if err := id.Validate(); err == nil {
			t.Errorf("%+v validated", id)
		}
	}
}

func TestAgentPeerPolicy(t *testing.T) {
	self := Node("a", "worker-1")
	const fw = "/kelpie.v1.AgentPeer/Forward"
	req := func(job, node string) proto.Message {
		return &agentpb.ForwardRequest{Job: job, Node: node, Command: &agentpb.ActionCommand{ActionId: "a-1", Kind: "ADJUST_BS"}}
	}
	for _, tt := range []struct {
		name   string
		id     Identity
		method string
		msg    proto.Message
		ok     bool
	}{
		{"a worker of the job, as itself", Node("a", "worker-0"), fw, req("a", "worker-0"), true},
		{"the call's start", Node("a", "worker-0"), fw, nil, true},
		{"a server of the job", Node("a", "server-0"), fw, req("a", "server-0"), true},
		{"a worker of the job, as another", Node("a", "worker-0"), fw, req("a", "worker-2"), false},
		{"a worker of the job, naming job b", Node("a", "worker-0"), fw, req("b", "worker-0"), false},
		{"a worker of job b", Node("b", "worker-0"), fw, nil, false},
		{"a worker of job b, naming job a", Node("b", "worker-0"), fw, req("a", "worker-0"), false},
		{"the scheduler", Scheduler(), fw, nil, false},
		{"an operator", Operator("x"), fw, nil, false},
		{"another service", Node("a", "worker-0"), "/kelpie.v1.ParameterServer/Push", nil, false},
	} {
		err := AgentPeerPolicy(self)(tt.id, tt.method, tt.msg)
		if (err == nil) != tt.ok {
			t.Errorf("AgentPeerPolicy(%s)(%v, %s) = %v; want ok=%v", tt.name, tt.id, tt.method, err, tt.ok)
		}
	}
}
