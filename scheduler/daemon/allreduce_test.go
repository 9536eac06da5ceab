package daemon

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"
)

// exchangeSpec is one MNIST job on 2 racks of 4 workers, in any exchange
// mode: same seed, optimizer and learning-rate schedule. The shards divide
// evenly among the workers (2 epochs of 60000 samples = 200 shards of one
// global batch of 600, 25 per worker), so every worker trains in every
// iteration. (With a tail — fewer shards left than workers — allreduce
// workers without data still exchange zero gradients, as they must to stay
// in step, while PS workers without data stop: with 1 epoch at a global
// batch of 240, 25 shards of 10 batches, the last 80 of 320 iterations run
// one worker and RAT crosses 0.33 × PS's bytes instead of 0.25.)
func exchangeSpec(exchange string) string {
	servers := "servers: 2\n  topology: {server-0: {rack: r0}, server-1: {rack: r1}, "
	if exchange != "ps" {
		servers = "topology: {"
	}
	return fmt.Sprintf(`name: mnist-%[1]s
model: {kind: mlp, hidden: [32]}
data: {kind: mnist, epochs: 2, batches_per_shard: 1, seed: 1}
train: {global_batch: 600, lr: 0.1, optimizer: momentum, lr_decay: cosine, lr_final: 0.1}
cluster:
  workers: 8
  exchange: %[1]s
  %[2]sworker-0: {rack: r0}, worker-1: {rack: r0}, worker-2: {rack: r0}, worker-3: {rack: r0},
    worker-4: {rack: r1}, worker-5: {rack: r1}, worker-6: {rack: r1}, worker-7: {rack: r1}}
`, exchange, servers)
}

// TestExchangeModesSameAccuracy is the exchange modes' end-to-end
// acceptance: `kelpie run` of the same job with PS (a server per rack),
// ring and RAT (no servers: the workers find each other through the
// scheduler and sum gradients over TCP, proving the job's secret to each
// other) reaches the same MNIST accuracy, and bytes_cross_region on 2 racks
// × 4 workers is what the designs give. Per iteration, with M the model's
// bytes: PS crosses 8M (each worker pushes and pulls the half of the model
// on the other rack's server), RAT 2M (one aggregator per rack sends its
// rack's sum up and gets the total back; RAT Alg. 1), ring 2 · 2(n−1)/n ·
// M = 3.5M (the ring crosses the racks on two edges, each carrying
// 2(n−1)/n of the vector). So RAT ≤ PS/4 and RAT ≤ ring ≤ 2 × RAT.
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
	t.Logf("bytes_cross_region: ps %.0f, ring %.0f, rat %.0f: rat/ps %.4f, ring/rat %.3f", ps, ring, rat, rat/ps, ring/rat)
	// The model: 784·32 + 32 + 32·10 + 10 floats; allreduce adds one (the
	// flag: a worker has data for the next iteration).
	const m = 4 * (784*32 + 32 + 32*10 + 10)
	iters := num("rat", "iterations")
	if want := 2 * (m + 4) * iters; rat < want || rat > want+4096 {
		t.Errorf("rat crosses %.0f bytes in %v iterations; RAT Alg. 1 gives 2 × (M+4) = %.0f (and a few hundred bytes of state agreement)", rat, iters, want)
	}
	if 4*rat > ps {
		t.Errorf("rat crosses %.0f bytes, more than a quarter of ps's %.0f (ratio %.4f)", rat, ps, rat/ps)
	}
	if ring < rat || ring > 2*rat {
		t.Errorf("ring crosses %.0f bytes; want between rat's %.0f and twice it (the design gives 1.75×)", ring, rat)
	}
	// The same bytes by region pair (the console's and /metrics' counters):
	// both directions carry bytes — for RAT the same (each rack's sum goes
	// out, the total comes back); for ring nearly (the chunks on the two
	// cross-rack edges differ by an element when the vector does not divide
	// by 8); PS's first pull only comes back, as much as the other rack's
	// server holds — and they add up to bytes_cross_region.
	for _, ex := range []string{"ps", "ring", "rat"} {
		pairs, _ := res[ex]["region_bytes"].([]any)
		by := map[string]float64{}
		var total float64
		for _, p := range pairs {
			m, _ := p.(map[string]any)
			b, _ := m["bytes"].(float64)
			by[fmt.Sprint(m["from_region"], "→", m["to_region"])] = b
			total += b
		}
		t.Logf("%s region_bytes %v", ex, by)
		symmetric := ex == "ps" || by["/r0→/r1"] == by["/r1→/r0"] ||
			ex == "ring" && math.Abs(by["/r0→/r1"]-by["/r1→/r0"]) < 0.001*total
		if len(by) != 2 || by["/r0→/r1"] <= 0 || by["/r1→/r0"] <= 0 || !symmetric || total != num(ex, "bytes_cross_region") {
			t.Errorf("%s: region_bytes %v (total %.0f); want both directions (equal for rat, within 0.1%% for ring), adding up to bytes_cross_region %.0f", ex, by, total, num(ex, "bytes_cross_region"))
		}
	}
}

// TestAllreduceElastic: `kelpie run` of a RAT job whose script adds a
// worker, removes one, restarts one (KILL_RESTART: its process is killed,
// the others' exchange breaks and they form the group again with the new
// process) and re-splits the batch: every action is applied, the trees
// being rebuilt at an iteration boundary each time, and the job still
// learns MNIST. The data plane is encrypted: every mesh's peers prove the
// job's secret and talk TLS with their node certificates, each naming the
// worker it claims to be (the restarted worker with its fresh one). The job
// is long enough (12 epochs) to outlast the script on a fast machine: at 5
// epochs it ended at 7.5 s, before the last step.
func TestAllreduceElastic(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	src := `name: rat-elastic
model: {kind: mlp, hidden: [32]}
data: {kind: mnist, epochs: 12, batches_per_shard: 10, seed: 1}
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
