package daemon

import (
	"testing"
)

// TestRollbackAuto: the fixed-delay straggler of TestClosedLoop — a
// smaller batch cannot help it — gets a batch cut from AntDT-ND in auto
// mode; the realized-effect judge finds the cut a miss, and the cut is
// rolled back at once (auto mode): an ADJUST_BS of the rollback policy
// restores the batch sizes from before it, and is applied.
func TestRollbackAuto(t *testing.T) {
	if testing.Short() {
		t.Skip("an MNIST job")
	}
	d := startLogged(t)
	defer d.Close(true)
	res := runJob(t, d, `
name: rollback
model: {kind: mlp, hidden: [32]}
data: {kind: mnist, epochs: 8, seed: 1}
train: {global_batch: 128, lr: 0.05, optimizer: momentum, momentum: 0.9}
cluster: {servers: 1, workers: 4}
sync: {model: bsp}
policies:
  antdt-nd: {mode: auto, lambda: 2.5, window_transient: 1s, window_persistent: 120s}
stragglers:
  - {node: worker-2, kind: compute, sleep: 25ms, intensity: 1, probability: 1, start: 3s, cured_by_restart: true}
`, nil)
	var cut, back bool
	for _, a := range res.Actions {
		t.Logf("%s %s %s (%s): %s", a.Kind, a.Node, a.State, a.Policy, a.Reason)
		switch {
		case a.Kind == "ADJUST_BS" && a.Policy == "antdt-nd" && a.State == "applied" && a.Realized != nil && a.Realized.Miss:
			cut = true
		case a.Kind == "ADJUST_BS" && a.Policy == "rollback" && a.State == "applied":
			back = true
		}
	}
	if !cut {
		t.Fatal("no applied ADJUST_BS of antdt-nd judged a miss")
	}
	if !back {
		t.Error("the missed batch cut was not rolled back in auto mode")
	}
}
