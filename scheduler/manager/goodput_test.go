package manager

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/ledger"
)

// TestLedgerInboxNeverWaits: a report does not wait for the ledger's lock,
// which a tick holds while it advances every node; what it said is taken
// in before the ledger is next read, in order, and the ledger then reads
// as it would had each report taken the lock itself.
func TestLedgerInboxNeverWaits(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	_, j, _ := historyJob(t, filepath.Join(t.TempDir(), "kelpie.db"), clk)
	servers := []string{"server-0"}
	report := func(w string) *coordinatorpb.ProgressReport {
		return &coordinatorpb.ProgressReport{Job: "hist", Node: w, BptSeconds: []float64{0.01, 0.01},
			Comm: []*coordinatorpb.CommSample{{Server: 0, Seconds: 0.004}, {Server: 0, Seconds: 0.002}}}
	}
	// What the ledger reads when each report takes the lock itself.
	want := ledger.New(j.submitted, []string{"worker-0", "worker-1"}, servers)
	at := clk.now()
	sent := []struct {
		w  string
		at time.Time
	}{{"worker-0", at.Add(time.Second)}, {"worker-1", at.Add(time.Second)}, {"worker-0", at.Add(3 * time.Second / 2)}}
	var comm float64 // summed as the manager sums it
	for _, s := range sent {
		// 0.020 s of BPT, 0.006 s on the wire with one server.
		want.Report(s.w, s.at, ledger.Measure{Compute: 0.014, Comm: 0.006})
		comm += 0.004
		comm += 0.002
	}

	j.gp.mu.Lock() // a tick advancing the ledger
	done := make(chan struct{})
	go func() {
		for _, s := range sent {
			j.goodputReport(s.w, report(s.w), s.at, servers)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a report waited for the ledger's lock")
	}
	j.gp.mu.Unlock()

	j.lockLedger()
	defer j.gp.mu.Unlock()
	if n := len(j.gp.in); n != 0 {
		t.Errorf("%d reports still queued after the ledger was locked", n)
	}
	if got := j.gp.comm["server-0"]; got != comm {
		t.Errorf("server-0's comm %v; want %v", got, comm)
	}
	now := at.Add(3 * time.Second)
	j.gp.led.Advance(now, ledger.Running, nil)
	want.Advance(now, ledger.Running, nil)
	for _, w := range []string{"worker-0", "worker-1"} {
		got, _ := j.gp.led.Node(w, now)
		exp, _ := want.Node(w, now)
		if got != exp {
			t.Errorf("%s: the ledger reads %+v; want %+v", w, got, exp)
		}
	}
}
