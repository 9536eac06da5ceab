package daemon

import (
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// TestUndoAcrossRestart: an operator's ADJUST_LR records, as it is
// dispatched, the learning-rate scales before it (its undo); the scheduler
// stops with the job live in its store and a new one starts on the same
// data dir: the restored action still carries its undo, so it can still
// be rolled back.
func TestUndoAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	first, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir, NoLaunch: true})
	if err != nil {
		t.Fatal(err)
	}
	name, err := first.Manager.Submit("name: undo\nmodel: {kind: softmax}\ndata: {kind: mnist, seed: 1}\n"+
		"train: {global_batch: 64}\ncluster: {workers: 2, servers: 1}\n", "test")
	if err != nil {
		first.Close(false)
		t.Fatal(err)
	}
	lr := &consolepb.Action{Kind: "ADJUST_LR", Args: &consolepb.Action_AdjustLr{AdjustLr: &consolepb.AdjustLRArgs{LrScale: map[string]float64{"worker-0": 0.5}}}}
	id, err := first.Manager.Trigger(name, lr, "alice")
	if err != nil {
		first.Close(false)
		t.Fatal(err)
	}
	undoOf := func(d *Daemon) *consolepb.ActionUndo {
		for _, v := range d.Manager.View([]string{name}, 0) {
			for _, a := range v.Actions {
				if a.Id == id {
					return a.Undo
				}
			}
		}
		return nil
	}
	if u := undoOf(first); u.GetLrScale()["worker-0"] != 1 {
		first.Close(false)
		t.Fatalf("undo before the restart = %v; want worker-0's scale 1", u)
	}
	first.Close(false) // the job stays live in the store

	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir, NoLaunch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	if u := undoOf(d); u.GetLrScale()["worker-0"] != 1 {
		t.Errorf("undo after the restart = %v; want worker-0's scale 1, as before it", u)
	}
}
