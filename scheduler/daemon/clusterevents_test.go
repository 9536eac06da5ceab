package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/scheduler/launch"
)

// TestClusterEventBeforeStart: a cluster launcher runs before the
// scheduler's manager exists (kelpie scheduler --launcher kubernetes); an
// event it delivers then — here a restored job's Pod found pending by the
// informer's first list — waits in the channel and reaches the job's event
// log once the daemon starts. Handed to the manager through a pointer
// stored after the daemon started, it was dropped.
func TestClusterEventBeforeStart(t *testing.T) {
	dir := t.TempDir()
	first, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir, NoLaunch: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Manager.Submit("name: podjob\nmodel: {kind: softmax}\ndata: {kind: mnist, seed: 1}\n"+
		"train: {global_batch: 64}\ncluster: {workers: 2, servers: 1}\n", "test"); err != nil {
		first.Close(false)
		t.Fatal(err)
	}
	first.Close(false) // the job stays live in the store, for the next scheduler to restore

	events := make(chan launch.ClusterEvent, 4)
	const msg = "pod podjob-worker-0 pending for 31s: 0/3 nodes are available"
	events <- launch.ClusterEvent{Job: "podjob", Node: "worker-0", Message: msg} // before the manager exists
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir, NoLaunch: true, ClusterEvents: events})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		evs, _ := d.Manager.EventsSince(0, 1000)
		for _, e := range evs {
			if e.Kind == "cluster" && e.Job == "podjob" && e.Node == "worker-0" && strings.Contains(e.Message, msg) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster event delivered before the scheduler started is not in the event log (%d events)", len(evs))
		}
	}
}
