package daemon

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"
)

// exchangeSpec is one MNIST job on 2 racks of 2 workers, in any exchange
// mode: same seed, optimizer and learning-rate schedule.
func exchangeSpec(exchange string) string {
	servers := "servers: 2\n  topology: {server-0: {rack: r0}, server-1: {rack: r1}, "
	if exchange != "ps" {
		servers = "topology: {"
	}
	return fmt.Sprintf(`name: mnist-%[1]s
model: {kind: mlp, hidden: [32]}
data: {kind: mnist, epochs: 1, batches_per_shard: 10, seed: 1}
train: {global_batch: 128, lr: 0.1, optimizer: momentum, lr_decay: cosine, lr_final: 0.1}
cluster:
  workers: 4
  exchange: %[1]s
  %[2]sworker-0: {rack: r0}, worker-1: {rack: r0}, worker-2: {rack: r1}, worker-3: {rack: r1}}
`, exchange, servers)
}

// TestExchangeModesSameAccuracy is the exchange modes' end-to-end
// acceptance: `kelpie run` of the same job with PS (2 servers), ring and
// RAT (no servers: the workers find each other through the scheduler and
// sum gradients over TCP) reaches the same MNIST accuracy, and
// bytes_cross_region shows RAT sending the least across the racks.
func TestExchangeModesSameAccuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	res := map[string]map[string]any{}
	for _, ex := range []string{"ps", "ring", "rat"} {
		stdout, _ := runHeadless(t, "exchange-"+ex, exchangeSpec(ex), 5*time.Minute)
		var r map[string]any
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("%s: result is not JSON: %v\n%s", ex, err, stdout)
		}
		res[ex] = r
		t.Logf("%s: accuracy %v, final_loss %v, iterations %v, samples %v, bytes_cross_region %v, train_seconds %v (loaded machine)",
			ex, r["accuracy"], r["final_loss"], r["iterations"], r["samples"], r["bytes_cross_region"], r["train_seconds"])
	}
	num := func(ex, k string) float64 {
		v, ok := res[ex][k].(float64)
		if !ok {
			t.Fatalf("%s: %s = %v; want a number", ex, k, res[ex][k])
		}
		return v
	}
	for _, ex := range []string{"ring", "rat"} {
		if d := math.Abs(num(ex, "accuracy") - num("ps", "accuracy")); d > 0.005 {
			t.Errorf("%s accuracy %v differs from ps %v by %.4f; want within 0.5 point", ex, num(ex, "accuracy"), num("ps", "accuracy"), d)
		}
		if num(ex, "samples") != num("ps", "samples") {
			t.Errorf("%s trained %v samples, ps %v", ex, num(ex, "samples"), num("ps", "samples"))
		}
	}
	if num("ps", "accuracy") < 0.85 {
		t.Errorf("ps accuracy %v; the job should learn MNIST", num("ps", "accuracy"))
	}
	ps, ring, rat := num("ps", "bytes_cross_region"), num("ring", "bytes_cross_region"), num("rat", "bytes_cross_region")
	if !(rat > 0 && rat < ring && rat < ps) {
		t.Errorf("bytes_cross_region: ps %v, ring %v, rat %v; want rat > 0 and the least", ps, ring, rat)
	}
}

// TestAllreduceElastic: `kelpie run` of a RAT job whose script adds a
// worker, removes one, restarts one (KILL_RESTART: its process is killed,
// the others' exchange breaks and they form the group again with the new
// process) and re-splits the batch: every action is applied, the trees
// being rebuilt at an iteration boundary each time, and the job still
// learns MNIST. The data plane is encrypted: every mesh's peers prove the
// job's secret and talk TLS with their node certificates, each naming the
// worker it claims to be (the restarted worker with its fresh one).
func TestAllreduceElastic(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	src := `name: rat-elastic
model: {kind: mlp, hidden: [32]}
data: {kind: mnist, epochs: 5, batches_per_shard: 10, seed: 1}
train: {global_batch: 128, lr: 0.1, optimizer: momentum}
cluster:
  workers: 4
  exchange: rat
  data_plane_encryption: on
  topology: {worker-0: {rack: r0}, worker-1: {rack: r0}, worker-2: {rack: r1}, worker-3: {rack: r1}, worker-4: {rack: r1}}
script:
  - {at: 2s, action: add-worker}
  - {at: 4s, action: remove-worker, node: worker-1}
  - {at: 6s, action: restart, node: worker-2}
  - {at: 8s, action: adjust-batch, sizes: {worker-0: 48, worker-2: 32, worker-3: 24, worker-4: 24}}
`
	stdout, _ := runHeadless(t, "rat-elastic", src, 5*time.Minute)
	var r struct {
		Accuracy float64 `json:"accuracy"`
		Samples  int64   `json:"samples"`
		Actions  []struct {
			Kind, Node, State, Error string
			Applied                  int64 `json:"applied_iteration"`
		} `json:"actions"`
		Skipped []any `json:"script_skipped"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("result: %v\n%s", err, stdout)
	}
	kinds := map[string]bool{}
	for _, a := range r.Actions {
		t.Logf("%s %s: %s at iteration %d %s", a.Kind, a.Node, a.State, a.Applied, a.Error)
		if a.State != "applied" {
			t.Errorf("%s %s is %s (%s); want applied", a.Kind, a.Node, a.State, a.Error)
		}
		kinds[a.Kind] = true
	}
	for _, k := range []string{"ADD_WORKER", "REMOVE_WORKER", "KILL_RESTART", "ADJUST_BS"} {
		if !kinds[k] {
			t.Errorf("no %s among the actions", k)
		}
	}
	if len(r.Skipped) != 0 {
		t.Errorf("script steps skipped: %v (the job ended too early to test them)", r.Skipped)
	}
	t.Logf("accuracy %.4f, samples %d", r.Accuracy, r.Samples)
	if r.Accuracy < 0.9 || r.Samples < 5*60000 {
		t.Errorf("accuracy %.4f over %d samples; want ≥ 0.9 over at least 5 epochs", r.Accuracy, r.Samples)
	}
}
