package daemon

import (
	"regexp"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// TestAntDTActionsLive: with a persistent worker straggler, AntDT-DD
// (auto) applies batch sizes with accumulation counts once (a device's
// micro-batch is capped at 32, so fast workers accumulate); then an
// operator turns backup workers on (the straggler's late gradients are
// dropped and their shards trained again) and scales its learning rate.
// Every action applies and every shard ends DONE.
func TestAntDTActionsLive(t *testing.T) {
	if testing.Short() {
		t.Skip("an MNIST job")
	}
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Exe: kelpieBin,
		NodeLog: logWriter{t}, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	res := runJob(t, d, `
name: antdt
model: {kind: mlp, hidden: [32]}
data: {kind: mnist, epochs: 2, seed: 1}
train: {global_batch: 128, lr: 0.05, optimizer: momentum, momentum: 0.9}
cluster: {servers: 2, workers: 4}
sync: {model: bsp}
policies:
  antdt-nd: {mode: off, lambda: 1.5, window_transient: 1s, window_persistent: 2s}
  antdt-dd: {mode: auto, min_accumulation: 1, max_accumulation: 4, max_batch: 32}
stragglers:
  - {node: worker-2, kind: compute, sleep: 20ms, intensity: 1, probability: 1, start: 0s}
`, func(name string) {
		// Once AntDT-DD has applied its split, the operator steps in.
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			applied := false
			for _, v := range d.Manager.View([]string{name}, 1) {
				for _, a := range v.Actions {
					applied = applied || (a.Kind == "ADJUST_BS" && a.State == "applied")
				}
			}
			if applied {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, a := range []*consolepb.Action{
			{Kind: "BACKUP_WORKERS", Params: map[string]float64{"drop": 1}},
			{Kind: "ADJUST_LR", Target: "worker-2", Params: map[string]float64{"lr_scale": 0.5}},
		} {
			if _, err := d.Manager.Trigger(name, a, "test"); err != nil {
				t.Errorf("trigger %s: %v", a.Kind, err)
			}
		}
	})
	kinds := map[string]string{}
	for _, a := range res.Actions {
		kinds[a.Kind] = a.State
		if a.Kind == "ADJUST_BS" {
			t.Logf("%s: %s", a.Policy, a.Reason)
			if a.Policy != "antdt-dd" {
				t.Errorf("ADJUST_BS by %s; want antdt-dd", a.Policy)
			}
			if !regexp.MustCompile(`worker-\d+ [2-9]×\d+`).MatchString(a.Reason) {
				t.Errorf("AntDT-DD's split %q accumulates nowhere; with micro-batches capped at 32 the fast workers must", a.Reason)
			}
		}
	}
	for _, k := range []string{"ADJUST_BS", "BACKUP_WORKERS", "ADJUST_LR"} {
		if kinds[k] != "applied" {
			t.Errorf("%s ended %q; want applied (all: %v)", k, kinds[k], kinds)
		}
	}
	var dropped int64
	for _, s := range res.Servers {
		dropped += s.Dropped
	}
	t.Logf("accuracy %.4f in %.1fs, samples %d, dropped %d, actions %v", res.Accuracy, res.JCTSeconds, res.Samples, dropped, kinds)
	// Backup workers took effect: the servers dropped late gradients (the
	// straggler's, whose shards were then trained again: ShardsDone below
	// counts each once).
	if dropped == 0 {
		t.Errorf("no gradient dropped after BACKUP_WORKERS applied (servers %+v)", res.Servers)
	}
	if res.ShardsDone != res.ShardsTotal {
		t.Errorf("shards %d/%d", res.ShardsDone, res.ShardsTotal)
	}
	if res.Samples < 120000 {
		t.Errorf("trained on %d samples; the data is 120000 (at least once)", res.Samples)
	}
	if res.Accuracy < 0.9 {
		t.Errorf("accuracy %.4f", res.Accuracy)
	}
	// The split went down through one primary agent, which forwarded it to
	// the three others over the agents' mTLS peer service: no fallback.
	events, _ := d.Manager.EventsSince(0, 0)
	primary := regexp.MustCompile(`ADJUST_BS: primary worker-\d forwards it to 3 agent\(s\)`)
	var viaPrimary int
	for _, e := range events {
		if primary.MatchString(e.Message) {
			viaPrimary++
		}
		if regexp.MustCompile(`: sent to .* directly`).MatchString(e.Message) {
			t.Errorf("a fallback: %s", e.Message)
		}
	}
	if viaPrimary != 1 {
		t.Errorf("%d ADJUST_BS went through a primary agent; want 1", viaPrimary)
	}
}
