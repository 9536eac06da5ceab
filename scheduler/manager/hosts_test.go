package manager

import (
	"reflect"
	"testing"

	"github.com/kelpie/kelpie/core/spec"
)

// TestHostPlan: moves take the host free longest and free the one left;
// a server relaunched with no host free shares the old one's host, which
// its shutdown then does not free; no plan without spare hosts or on
// Kubernetes.
func TestHostPlan(t *testing.T) {
	s, err := spec.Parse("spec.yaml", []byte("name: x\ncluster: {servers: 2, workers: 3, spare_hosts: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if newHostPlan(s, true) != nil {
		t.Error("a plan on Kubernetes; want none (the cluster places Pods)")
	}
	none, _ := spec.Parse("spec.yaml", []byte("name: x\n"))
	if newHostPlan(none, false) != nil {
		t.Error("a plan without spare hosts; want none (restarts in place)")
	}
	p := newHostPlan(s, false)
	nodes := map[string]*nodeState{}
	for _, n := range append(s.ServerNames(), s.WorkerNames()...) {
		nodes[n] = &nodeState{name: n}
	}
	step := func(what string, node, wantTo, wantFrom string, wantOK bool, wantFree ...string) {
		t.Helper()
		to, from, ok := p.take(node)
		if to != wantTo || from != wantFrom || ok != wantOK {
			t.Errorf("%s: take(%s) = %q, %q, %v; want %q, %q, %v", what, node, to, from, ok, wantTo, wantFrom, wantOK)
		}
		if ok {
			p.release(from, nodes)
		}
		if !reflect.DeepEqual(p.free, wantFree) && !(len(p.free) == 0 && len(wantFree) == 0) {
			t.Errorf("%s: free %v; want %v", what, p.free, wantFree)
		}
	}
	step("worker-2 moves to the spare", "worker-2", "spare-0", "worker-2", true, "worker-2")
	step("worker-1 moves onto the host worker-2 left", "worker-1", "worker-2", "worker-1", true, "worker-1")
	step("worker-2 moves again", "worker-2", "worker-1", "spare-0", true, "spare-0")
	if got := p.hostOf("worker-0"); got != "worker-0" {
		t.Errorf("hostOf(worker-0) = %q; want its own host", got)
	}
	// A server relaunch with the one free host taken: the next one shares
	// the old server's host, and its shutdown leaves the host taken.
	to, _, _ := p.take("server-2") // server-1's relaunch as server-2
	nodes["server-2"] = &nodeState{name: "server-2"}
	p.leave("server-1", nodes)
	if to != "spare-0" || !reflect.DeepEqual(p.free, []string{"server-1"}) {
		t.Errorf("server-1 relaunched as server-2 on %q, free %v; want spare-0, [server-1]", to, p.free)
	}
	p.free = nil // none free: server-0's relaunch as server-3 stays on host server-0
	p.on["server-3"] = p.hostOf("server-0")
	nodes["server-3"] = &nodeState{name: "server-3"}
	p.leave("server-0", nodes)
	if len(p.free) != 0 || p.hostOf("server-3") != "server-0" {
		t.Errorf("server-0 replaced in place: free %v, server-3 on %q; want none free, server-0", p.free, p.hostOf("server-3"))
	}
}

// TestHostPlanRestore: a restarted scheduler puts a moved node back on
// the host its agent last reported, and frees the host it left.
func TestHostPlanRestore(t *testing.T) {
	s, err := spec.Parse("spec.yaml", []byte("name: x\ncluster: {servers: 1, workers: 3, spare_hosts: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*nodeState{}
	for _, n := range append(s.ServerNames(), s.WorkerNames()...) {
		nodes[n] = &nodeState{name: n, host: n}
	}
	nodes["worker-2"].host = "spare-0"   // moved before the scheduler restarted
	nodes["worker-1"].host = "some-host" // not a simulated host: its own
	p := newHostPlan(s, false)
	p.restore(s, nodes)
	if got := p.hostOf("worker-2"); got != "spare-0" {
		t.Errorf("hostOf(worker-2) = %q; want spare-0", got)
	}
	if got := p.hostOf("worker-1"); got != "worker-1" {
		t.Errorf("hostOf(worker-1) = %q; want its own host", got)
	}
	if want := []string{"spare-1", "worker-2"}; !reflect.DeepEqual(p.free, want) {
		t.Errorf("free %v; want %v", p.free, want)
	}
}
