package identity

import "testing"

// TestServerPolicyProbe: a server's Probe answers its own job's workers
// only: not a server, not another job's worker, not the scheduler.
func TestServerPolicyProbe(t *testing.T) {
	p := ServerPolicy(Node("a", "server-0"))
	const m = "/kelpie.v1.ParameterServer/Probe"
	if err := p(Node("a", "worker-1"), m, nil); err != nil {
		t.Errorf("a worker of the job: %v", err)
	}
	for _, id := range []Identity{Node("a", "server-1"), Node("b", "worker-1"), Scheduler(), Operator("ops")} {
		if err := p(id, m, nil); err == nil {
			t.Errorf("%v may probe a server of job a", id)
		}
	}
}
