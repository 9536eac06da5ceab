package manager

import (
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/scheduler/clock"
)

// statsHarness is a job of two servers whose counters arrive as agent
// messages, on a fake clock.
func statsHarness() (*Manager, *jobState, *clock.Fake, func(node string, st *pspb.ServerStats)) {
	m, j, f := waitHarness()
	m.cfg.Now = f.Now
	j.nodes = map[string]*nodeState{}
	for _, name := range []string{"server-0", "server-1"} {
		j.nodes[name] = &nodeState{name: name, role: "server"}
	}
	send := func(node string, st *pspb.ServerStats) {
		takeOn(m, j, j.nodes[node], &agentpb.AgentMessage{Body: &agentpb.AgentMessage_ServerStats{ServerStats: st}})
	}
	return m, j, f, send
}

// TestFinalServerCounters: the result waits for counters each live server
// sends after it was asked to shut down (woken by their arrival, not
// polling), and a removed server is left out.
func TestFinalServerCounters(t *testing.T) {
	m, j, f, send := statsHarness()
	send("server-0", &pspb.ServerStats{Dprs: 1}) // before the shutdown: stale
	f.Advance(time.Second)
	asked := m.now()
	addrs, names := []string{"a0", "a1", ""}, []string{"server-0", "server-1", "server-2"}
	type result struct {
		out []ServerResult
		err error
	}
	res := make(chan result, 1)
	go func() {
		out, err := m.finalServers(j, addrs, names, asked)
		res <- result{out, err}
	}()
	send("server-0", &pspb.ServerStats{Dprs: 7, Pushes: 100})
	select {
	case r := <-res:
		t.Fatalf("finalServers returned %v, %v with server-1 still to report", r.out, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	send("server-1", &pspb.ServerStats{Dprs: 3, Blocks: []uint32{1, 2}})
	r := <-res
	if r.err != nil {
		t.Fatalf("finalServers: %v", r.err)
	}
	want := map[string]ServerResult{"server-0": {Name: "server-0", DPRs: 7, Pushes: 100}, "server-1": {Name: "server-1", DPRs: 3, Blocks: 2}}
	if len(r.out) != len(want) {
		t.Fatalf("finalServers = %+v; want %+v", r.out, want)
	}
	for _, sv := range r.out {
		w := want[sv.Name]
		if sv.DPRs != w.DPRs || sv.Pushes != w.Pushes || sv.Blocks != w.Blocks {
			t.Errorf("%s = %+v; want %+v", sv.Name, sv, w)
		}
	}
}

// TestFinalServerCountersTimeOut: a server whose final counters never come
// is reported with the last ones it sent, after finalStatsTimeout on the
// job's clock, with an error saying so.
func TestFinalServerCountersTimeOut(t *testing.T) {
	m, j, fake, send := statsHarness()
	send("server-0", &pspb.ServerStats{Dprs: 4})
	send("server-1", &pspb.ServerStats{Dprs: 5})
	asked := m.now().Add(time.Millisecond)
	fake.Advance(time.Millisecond)
	res := make(chan error, 1)
	var out []ServerResult
	go func() {
		var err error
		out, err = m.finalServers(j, []string{"a0", "a1"}, []string{"server-0", "server-1"}, asked)
		res <- err
	}()
	for fake.Waiters() == 0 {
		time.Sleep(time.Millisecond) // until its deadline timer is armed
	}
	fake.Advance(finalStatsTimeout)
	if err := <-res; err == nil {
		t.Error("finalServers without fresh counters: no error")
	}
	if len(out) != 2 || out[0].DPRs+out[1].DPRs != 9 {
		t.Errorf("finalServers = %+v; want the last counters of both", out)
	}
}
