package spec

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// defaults is the Spec every short spec starts from: Parse of "name: x".
func defaults() *Spec {
	return &Spec{
		Name:  "x",
		Model: Model{Kind: ModelMLP, Hidden: []int{128}},
		Data:  Data{Kind: DataMNIST, Epochs: 1, BatchesPerShard: 10, Seed: 1},
		Train: Train{GlobalBatch: 256, LR: 0.1, Optimizer: OptimizerSGD, LRDecay: LRDecayNone},
		Cluster: Cluster{
			Servers: 1, Workers: 1, BlockBytes: 4194304, Assignment: AssignRoundRobin,
			Exchange: ExchangePS, Transport: TransportTCP, DataPlaneEncryption: EncryptionOff, Elasticity: ElasticityHot, SnapshotInterval: 30 * time.Second,
			MinWorkers: 1, MinServers: 1,
		},
		Sync:     Sync{Model: SyncBSP, Staleness: 3, Pull: PullLazy, PSSP: PSSP{C: 0.5, Alpha: 1}, Drop: Drop{WaitFor: 1}},
		Policies: toyDefaults(),
	}
}

func TestParseGood(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want func(s *Spec) // edits defaults() into the expected Spec
	}{
		{"minimal", "name: x\n", func(s *Spec) {}},
		{"null sections count as left out", "name: x\nmodel:\ncluster: ~\n", func(s *Spec) {}},
		{"sparse-lr picks synthetic-ctr", "name: x\nmodel: {kind: sparse-lr}\n", func(s *Spec) {
			s.Model = Model{Kind: ModelSparseLR}
			s.Data.Kind = DataSyntheticCTR
			s.Data.Samples, s.Data.TestSamples, s.Data.Features, s.Data.Fields = 200000, 20000, 100000, 8
		}},
		{"synthetic-ctr picks sparse-lr", "name: x\ndata: {kind: synthetic-ctr, features: 1000, fields: 4}\n", func(s *Spec) {
			s.Model = Model{Kind: ModelSparseLR}
			s.Data.Kind = DataSyntheticCTR
			s.Data.Samples, s.Data.TestSamples, s.Data.Features, s.Data.Fields = 200000, 20000, 1000, 4
		}},
		{"softmax has no hidden layers", "name: x\nmodel: {kind: softmax}\n", func(s *Spec) {
			s.Model = Model{Kind: ModelSoftmax}
		}},
		{"momentum defaults to 0.9", "name: x\ntrain: {optimizer: momentum, lr: 1e-2}\n", func(s *Spec) {
			s.Train.Optimizer, s.Train.Momentum, s.Train.LR = OptimizerMomentum, 0.9, 0.01
		}},
		{"exponent floats", "name: x\ntrain: {lr: 1e+00}\n", func(s *Spec) { s.Train.LR = 1 }},
		{"wait_for follows workers", "name: x\ncluster: {workers: 4, servers: 2}\n", func(s *Spec) {
			s.Cluster.Workers, s.Cluster.Servers, s.Sync.Drop.WaitFor = 4, 2, 3
		}},
		{"encrypted data plane over grpc", "name: x\ncluster: {transport: grpc, data_plane_encryption: on}\n", func(s *Spec) {
			s.Cluster.Transport, s.Cluster.DataPlaneEncryption = TransportGRPC, EncryptionOn
		}},
		{"block_bytes with a unit", "name: x\ncluster: {block_bytes: 1MiB, snapshot_interval: 0}\n", func(s *Spec) {
			s.Cluster.BlockBytes, s.Cluster.SnapshotInterval = 1<<20, 0
		}},
		{"batch sizes", "name: x\ntrain: {global_batch: 10}\ncluster: {workers: 2, batch_sizes: {worker-0: 7, worker-1: 3}}\n", func(s *Spec) {
			s.Train.GlobalBatch, s.Cluster.Workers = 10, 2
			s.Cluster.BatchSizes = map[string]int{"worker-0": 7, "worker-1": 3}
		}},
		{"allreduce needs no servers", "name: x\ncluster: {exchange: ring, workers: 4, topology: {worker-0: {rack: a}}}\n", func(s *Spec) {
			s.Cluster.Exchange, s.Cluster.Workers, s.Cluster.Servers, s.Cluster.MinServers = ExchangeRing, 4, 0, 0
			s.Cluster.Topology = map[string]Labels{"worker-0": {Rack: "a"}}
			s.Sync.Drop.WaitFor = 3
		}},
		{"labels may look like numbers", "name: x\ncluster: {topology: {worker-0: {rack: 1}, server-0: {pod: true}}}\n", func(s *Spec) {
			s.Cluster.Topology = map[string]Labels{"worker-0": {Rack: "1"}, "server-0": {Pod: "true"}}
		}},
		{"policies and pssp", `name: x
sync: {model: pssp, pssp: {alpha: 0.8, dynamic: true}}
policies:
  toy: {mode: approve, ratio: 1.3}
`, func(s *Spec) {
			s.Sync.Model, s.Sync.PSSP = SyncPSSP, PSSP{C: 0.5, Alpha: 0.8, Dynamic: true}
			s.Policies.SetMode("toy", ModeApprove)
			s.Policies["toy"].Params["ratio"] = 1.3
		}},
		{"toy flag", "name: x\npolicies: {toy: {mode: auto, flag: true}}\n", func(s *Spec) {
			s.Policies.SetMode("toy", ModeAuto)
			s.Policies["toy"].Params["flag"] = 1
		}},
		{"toy flag off", "name: x\npolicies: {toy: {flag: false}}\n", func(s *Spec) {}},
		{"straggler defaults by kind", `name: x
cluster: {workers: 2}
stragglers:
  - {node: worker-1, kind: compute, sleep: 50ms}
  - {node: worker-0, kind: cpu, intensity: 0.25, follows_restart: true}
  - node: server-0
    kind: bandwidth
    rate: 500KB/s
    start: 1m
    end: 90s
`, func(s *Spec) {
			s.Cluster.Workers = 2
			s.Stragglers = []Straggler{
				{Node: "worker-1", Kind: StragglerCompute, Sleep: 50 * time.Millisecond, Intensity: 1, Probability: 1, Line: 4},
				{Node: "worker-0", Kind: StragglerCPU, Intensity: 0.25, Probability: 1, FollowsRestart: true, Line: 5},
				{Node: "server-0", Kind: StragglerBandwidth, Rate: 500e3, Start: time.Minute, End: 90 * time.Second, Line: 6},
			}
		}},
		{"scripted adds name their nodes; later steps may use them", `name: x
cluster: {workers: 2}
stragglers:
  - {node: worker-3, kind: pause, start: 40s}
script:
  - {at: 30s, action: add-worker}
  - {at: 10s, action: add-worker, node: worker-2}
  - {at: 20s, action: add-server}
  - {at: 35s, action: restart, node: server-1}
  - {at: 36s, action: remove-worker, node: worker-0}
  - {at: 40s, action: adjust-batch, sizes: {worker-1: 100, worker-2: 100, worker-3: 56}}
  - {at: 50s, action: set-sync, model: ssp, staleness: 1}
  - {at: 60s, action: reassign, assignment: psld}
`, func(s *Spec) {
			s.Cluster.Workers, s.Sync.Drop.WaitFor = 2, 1
			s.Stragglers = []Straggler{{Node: "worker-3", Kind: StragglerPause, Start: 40 * time.Second, Line: 4}}
			sy := s.Sync
			sy.Model, sy.Staleness = SyncSSP, 1
			s.Script = []ScriptStep{
				{At: 30 * time.Second, Action: ActionAddWorker, Node: "worker-3", Line: 6},
				{At: 10 * time.Second, Action: ActionAddWorker, Node: "worker-2", Line: 7},
				{At: 20 * time.Second, Action: ActionAddServer, Node: "server-1", Line: 8},
				{At: 35 * time.Second, Action: ActionRestart, Node: "server-1", Line: 9},
				{At: 36 * time.Second, Action: ActionRemoveWorker, Node: "worker-0", Line: 10},
				{At: 40 * time.Second, Action: ActionAdjustBatch, Sizes: map[string]int{"worker-1": 100, "worker-2": 100, "worker-3": 56}, Line: 11},
				{At: 50 * time.Second, Action: ActionSetSync, Sync: &sy, Line: 12},
				{At: time.Minute, Action: ActionReassign, Assignment: AssignPSLD, Line: 13},
			}
		}},
		{"EPS sizes; stragglers may name nodes up to the maximum", `name: x
train: {global_batch: 64}
cluster: {workers: 2, servers: 2, min_workers: 2, max_workers: 4, min_servers: 1, max_servers: 3}
stragglers:
  - {node: worker-3, kind: cpu, intensity: 0.5}
  - {node: server-2, kind: bandwidth, rate: 1MB/s}
`, func(s *Spec) {
			s.Train.GlobalBatch = 64
			s.Cluster.Workers, s.Cluster.Servers, s.Sync.Drop.WaitFor = 2, 2, 1
			s.Cluster.MinWorkers, s.Cluster.MaxWorkers, s.Cluster.MinServers, s.Cluster.MaxServers = 2, 4, 1, 3
			s.Stragglers = []Straggler{
				{Node: "worker-3", Kind: StragglerCPU, Intensity: 0.5, Probability: 1, Line: 5},
				{Node: "server-2", Kind: StragglerBandwidth, Rate: 1e6, Line: 6},
			}
		}},
		{"anchors and merge keys", `name: x
cluster: {workers: 3}
stragglers:
  - &slow {node: worker-0, kind: compute, sleep: 10ms, intensity: 0.5}
  - {<<: *slow, node: worker-1}
  - *slow
`, func(s *Spec) {
			s.Cluster.Workers, s.Sync.Drop.WaitFor = 3, 2
			st := Straggler{Node: "worker-0", Kind: StragglerCompute, Sleep: 10 * time.Millisecond, Intensity: 0.5, Probability: 1}
			s.Stragglers = []Straggler{st, st, st}
			s.Stragglers[0].Line, s.Stragglers[1].Line, s.Stragglers[2].Line = 4, 5, 6
			s.Stragglers[1].Node = "worker-1"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse("spec.yaml", []byte(tt.src))
			if err != nil {
				t.Fatalf("Parse(%q) error:\n%v", tt.src, err)
			}
			want := defaults()
			tt.want(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse(%q) =\n%+v\nwant\n%+v", tt.src, got, want)
			}
			checkRoundTrip(t, got)
		})
	}
}

func TestParseBad(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // every error line, in order
	}{
		{"empty", "", []string{"spec.yaml: name: required"}},
		{"not a mapping", "- a\n", []string{
			"spec.yaml:1: want a mapping, got a list",
			"spec.yaml:1: name: required",
		}},
		{"syntax", "name: x\nmodel: {kind: mlp\n", []string{"spec.yaml:2: invalid YAML: could not find flow mapping end token '}'"}},
		{"two documents", "name: x\n---\nname: y\n", []string{"spec.yaml:3: a spec is one YAML document; found another"}},
		{"workers zero and typo", `name: x
data: {kind: mnist}
train: {lr: 0.1}
model:
  kind: mlp
cluster:
  workers: 0
sync:
  model: bsp
  staleness: 1
  pull: lazy
  modle: asp
`, []string{
			"spec.yaml:7: cluster.workers: must be at least 1 (got 0)",
			`spec.yaml:12: sync.modle: unknown key (did you mean "model"?)`,
		}},
		{"wrong types name key and line", `name: x
data:
  epochs: "3"
  seed: 1.5
train:
  lr: fast
  global_batch: [1]
cluster:
  snapshot_interval: 10
  block_bytes: 4 lots
sync:
  pssp: {dynamic: yes}
`, []string{
			`spec.yaml:3: data.epochs: want an integer, got "3"`,
			"spec.yaml:4: data.seed: want an integer, got 1.5",
			`spec.yaml:6: train.lr: want a number, got "fast"`,
			"spec.yaml:7: train.global_batch: want an integer, got a list",
			"spec.yaml:9: cluster.snapshot_interval: want a duration like 5s or 200ms, got 10",
			`spec.yaml:10: cluster.block_bytes: want a size like 4194304 or 4MiB: unknown unit "lots" (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)`,
			`spec.yaml:12: sync.pssp.dynamic: want true or false, got "yes"`,
		}},
		{"bad name and enums", `name: Mnist_MLP
model: {kind: cnn}
train: {optimizer: adagrad}
cluster: {assignment: psl, exchange: tree, elasticity: cold, data_plane_encryption: maybe}
sync: {model: bsq, pull: eager}
policies: {toy: {mode: on}}
`, []string{
			`spec.yaml:1: name: must be lowercase letters, digits and '-', starting and ending with a letter or digit (got "Mnist_MLP")`,
			`spec.yaml:2: model.kind: must be one of softmax, mlp, sparse-lr, torch (got "cnn")`,
			`spec.yaml:3: train.optimizer: must be one of sgd, momentum, adam (got "adagrad")`,
			`spec.yaml:4: cluster.assignment: must be one of round-robin, size-balanced, psld, mxnet (got "psl"; did you mean "psld"?)`,
			`spec.yaml:4: cluster.exchange: must be one of ps, ring, rat (got "tree")`,
			`spec.yaml:4: cluster.data_plane_encryption: must be one of off, on (got "maybe")`,
			`spec.yaml:4: cluster.elasticity: must be one of hot, checkpoint-restart (got "cold")`,
			`spec.yaml:5: sync.model: must be one of bsp, asp, ssp, dsps, drop, pssp (got "bsq"; did you mean "bsp"?)`,
			`spec.yaml:5: sync.pull: must be one of lazy, soft-barrier (got "eager")`,
			`spec.yaml:6: policies.toy.mode: must be one of auto, approve, off (got "on")`,
		}},
		{"EPS sizes out of range", `name: x
train: {global_batch: 8}
cluster: {workers: 2, servers: 2, min_workers: 3, max_workers: 9, min_servers: 0, max_servers: 1}
stragglers:
  - {node: worker-9, kind: pause}
`, []string{
			"spec.yaml:3: cluster.min_workers: must be at most cluster.workers (2) (got 3)",
			"spec.yaml:3: cluster.max_workers: must be at most train.global_batch (8) (got 9)",
			"spec.yaml:3: cluster.min_servers: must be at least 1 (got 0)",
			"spec.yaml:3: cluster.max_servers: must be 0 (no limit) or at least cluster.servers (2) (got 1)",
			"spec.yaml:5: stragglers[0].node: no node worker-9 in the cluster (workers are worker-0..worker-8)",
		}},
		{"name too long", "name: " + strings.Repeat("a", 64) + "\n", []string{
			"spec.yaml:1: name: must be at most 63 characters (got 64)",
		}},
		{"duplicate and unknown keys", `name: x
cluster:
  workers: 2
  workers: 3
  worker: 3
polices: {}
`, []string{
			"spec.yaml:4: cluster.workers: duplicate key (first given on line 3)",
			`spec.yaml:5: cluster.worker: unknown key (did you mean "workers"?)`,
			`spec.yaml:6: polices: unknown key (did you mean "policies"?)`,
		}},
		{"anchors live under known keys only", "name: x\nx-common: &c {kind: pause}\n", []string{
			`spec.yaml:2: x-common: unknown key`,
		}},
		{"merge of a non-mapping", "name: x\ncluster: {<<: [1], workers: 2}\n", []string{
			"spec.yaml:2: cluster: << must merge a mapping, got 1",
		}},
		{"model and data disagree", "name: x\nmodel: {kind: sparse-lr, hidden: [64]}\ndata: {kind: mnist}\n", []string{
			"spec.yaml:2: model.kind: model sparse-lr trains on synthetic-ctr data, not mnist",
			"spec.yaml:2: model.hidden: only used by kind mlp (kind is sparse-lr)",
		}},
		{"learning-rate decay", `name: x
train: {lr_decay: exponential, lr_final: 1.5}
`, []string{
			"spec.yaml:2: train.lr_decay: must be one of none, cosine, linear (got \"exponential\")",
			"spec.yaml:2: train.lr_final: must be in [0, 1] (got 1.5)",
		}},
		{"final learning rate without a decay", `name: x
train: {lr_final: 0.1}
`, []string{
			"spec.yaml:2: train.lr_final: only used with lr_decay cosine or linear",
		}},
		{"counts and ranges", `name: x
model: {hidden: [64, 0]}
data: {epochs: 0, batches_per_shard: -1}
train: {global_batch: 2, lr: 0, momentum: 0.5}
cluster: {workers: 4, block_bytes: 0, snapshot_interval: -1s}
sync: {staleness: -1, pssp: {c: 1.5, alpha: 0}, drop: {wait_for: 5}}
`, []string{
			"spec.yaml:2: model.hidden[1]: must be at least 1 (got 0)",
			"spec.yaml:3: data.epochs: must be at least 1 (got 0)",
			"spec.yaml:3: data.batches_per_shard: must be at least 1 (got -1)",
			"spec.yaml:4: train.lr: must be positive (got 0)",
			"spec.yaml:4: train.momentum: only used by optimizer momentum (optimizer is sgd)",
			"spec.yaml:4: train.global_batch: must be at least cluster.workers (4) (got 2)",
			"spec.yaml:5: cluster.block_bytes: must be at least 1 (got 0)",
			"spec.yaml:5: cluster.snapshot_interval: must not be negative (got -1s)",
			"spec.yaml:6: sync.staleness: must be at least 0 (got -1)",
			"spec.yaml:6: sync.pssp.c: must be between 0 and 1 (got 1.5)",
			"spec.yaml:6: sync.pssp.alpha: must be more than 0 and at most 1 (got 0)",
			"spec.yaml:6: sync.drop.wait_for: must be at most the number of workers (4) (got 5)",
		}},
		{"batch sizes", `name: x
train: {global_batch: 100}
cluster:
  workers: 3
  batch_sizes:
    worker-0: 50
    worker-1: 40
    worker-7: 10
`, []string{
			`spec.yaml:5: cluster.batch_sizes: must give every worker a batch size; missing worker-2`,
			`spec.yaml:8: cluster.batch_sizes.worker-7: "worker-7" is not a live worker`,
		}},
		{"batch sizes sum", "name: x\ncluster: {workers: 2, batch_sizes: {worker-0: 100, worker-1: 0}}\n", []string{
			"spec.yaml:2: cluster.batch_sizes.worker-1: must be at least 1 (got 0)",
			"spec.yaml:2: cluster.batch_sizes: must sum to train.global_batch (256) (got 100)",
		}},
		{"allreduce", "name: x\ncluster: {exchange: ring}\nsync: {model: asp}\npolicies: {toy: {mode: auto}}\nscript:\n  - {at: 1s, action: add-server}\n", []string{
			"spec.yaml:3: sync.model: exchange ring is synchronous allreduce: only bsp (got asp)",
			"spec.yaml:4: policies.toy.mode: needs exchange ps (exchange is ring)",
			"spec.yaml:6: script[0].action: add-server needs exchange ps (exchange is ring)",
		}},
		{"allreduce servers", "name: x\nmodel: {kind: sparse-lr}\ncluster: {exchange: rat, servers: 2, min_servers: 1, workers: 3}\nscript:\n  - {at: 1s, action: remove-worker, node: worker-1}\n  - {at: 2s, action: restart, node: worker-0}\n", []string{
			"spec.yaml:3: cluster.servers: must be 0 for exchange rat: allreduce sums gradients among the workers (got 2)",
			"spec.yaml:3: cluster.exchange: rat sums dense gradients: model sparse-lr needs exchange ps",
			"spec.yaml:3: cluster.min_servers: must be 0 for exchange rat: it has no parameter servers (got 1)",
		}},
		{"stragglers", `name: x
cluster: {workers: 2, servers: 1}
stragglers:
  - {node: worker-2, kind: compute, sleep: 1s}
  - {node: server-1, kind: cpu}
  - {node: worker-0, kind: cpu, intensity: 1, sleep: 1s}
  - {node: worker-0, kind: compute, sleep: 1s, intensity: 1.5, probability: -0.1}
  - {node: worker-0, kind: bandwidth, rate: 10 parsecs/s}
  - {node: worker-0, kind: bandwidth, rate: 0}
  - {node: worker-0, kind: pause, start: 10s, end: 5s, period: 10s}
  - {node: worker-0, kind: pause, period: 10s, on: 20s}
  - {node: gpu-0, kind: slow}
  - {kind: pause}
  - node: worker-01
    kind: pause
    follows_restart: "yes"
  - {node: worker-0}
  - {node: worker-0, kind: pause, cured_by_restart: true, follows_restart: true}
`, []string{
			"spec.yaml:4: stragglers[0].node: no node worker-2 in the cluster (workers are worker-0..worker-1)",
			"spec.yaml:5: stragglers[1].node: no node server-1 in the cluster (servers are server-0)",
			"spec.yaml:5: stragglers[1].intensity: required for kind cpu",
			"spec.yaml:6: stragglers[2].sleep: not used by kind cpu",
			"spec.yaml:6: stragglers[2].intensity: must be at least 0 and less than 1 for kind cpu (got 1)",
			"spec.yaml:7: stragglers[3].intensity: must be between 0 and 1 (got 1.5)",
			"spec.yaml:7: stragglers[3].probability: must be between 0 and 1 (got -0.1)",
			`spec.yaml:8: stragglers[4].rate: want a rate like 20MiB/s: unknown unit "parsecs" (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB), got "10 parsecs/s"`,
			"spec.yaml:9: stragglers[5].rate: must be positive (got 0)",
			"spec.yaml:10: stragglers[6].end: must be after start (10s) (got 5s)",
			"spec.yaml:10: stragglers[6].period: needs on: how long the straggler is active in each period",
			"spec.yaml:11: stragglers[7].on: must be positive and at most period (10s) (got 20s)",
			`spec.yaml:12: stragglers[8].node: want a node name such as worker-0 or server-1 (got "gpu-0")`,
			`spec.yaml:12: stragglers[8].kind: must be one of compute, cpu, cpu-sleep, bandwidth, pause, link (got "slow")`,
			"spec.yaml:13: stragglers[9].node: required",
			`spec.yaml:14: stragglers[10].node: want a node name such as worker-0 or server-1 (got "worker-01")`,
			`spec.yaml:16: stragglers[10].follows_restart: want true or false, got "yes"`,
			"spec.yaml:17: stragglers[11].kind: required (one of compute, cpu, cpu-sleep, bandwidth, pause, link)",
			"spec.yaml:18: stragglers[12].cured_by_restart: a process's own slowness does not follow it to a new host: not with follows_restart",
		}},
		{"script", `name: x
train: {global_batch: 3}
cluster: {workers: 2, servers: 1}
script:
  - {action: restart, node: worker-0}
  - {at: 1s, action: explode}
  - {at: 2s, action: remove-server, node: server-0}
  - {at: 3s, action: remove-worker}
  - {at: 4s, action: remove-worker, node: server-0}
  - {at: 5s, action: add-worker, node: worker-9, sizes: {worker-0: 1}}
  - {at: 6s, action: add-worker}
  - {at: 7s, action: remove-worker, node: worker-1}
  - {at: 8s, action: restart, node: worker-1}
  - {at: 9s, action: adjust-batch, sizes: {worker-0: 1, worker-2: 1, worker-3: 2}}
  - {at: 10s, action: adjust-batch}
  - {at: 11s, action: set-sync, model: drop, drop: {wait_for: 4}, assignment: psld}
  - {at: 12s, action: reassign, assignment: random}
  - {at: -1s, action: restart, node: worker-0}
`, []string{
			"spec.yaml:5: script[0].at: required",
			`spec.yaml:6: script[1].action: must be one of add-server, remove-server, add-worker, remove-worker, restart, adjust-batch, reassign, set-sync (got "explode")`,
			"spec.yaml:7: script[2].node: cannot remove the last server",
			"spec.yaml:8: script[3].node: required for action remove-worker",
			`spec.yaml:9: script[4].node: want a worker name such as worker-0 (got "server-0")`,
			"spec.yaml:10: script[5].sizes: not used by action add-worker",
			`spec.yaml:10: script[5].node: this step creates worker-2 (got "worker-9")`,
			"spec.yaml:11: script[6].action: would leave more workers (4) than train.global_batch (3)",
			"spec.yaml:13: script[8].node: worker-1 is not running at 8s",
			"spec.yaml:14: script[9].sizes: must sum to train.global_batch (3) (got 4)",
			"spec.yaml:15: script[10].sizes: required for action adjust-batch",
			"spec.yaml:16: script[11].assignment: not used by action set-sync",
			"spec.yaml:16: script[11].drop.wait_for: must be at most the number of workers (3) (got 4)",
			`spec.yaml:17: script[12].assignment: must be one of round-robin, size-balanced, psld, mxnet (got "random")`,
			"spec.yaml:18: script[13].at: must not be negative (got -1s)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse("spec.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, nil; want errors:\n%s", tt.src, s, strings.Join(tt.want, "\n"))
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("Parse(%q) error %T is not Errors", tt.src, err)
			}
			got := strings.Split(err.Error(), "\n")
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse(%q) errors:\n%s\nwant:\n%s", tt.src, err, strings.Join(tt.want, "\n"))
			}
		})
	}
}

func checkRoundTrip(t testing.TB, s *Spec) {
	t.Helper()
	out := s.YAML()
	back, err := Parse("canonical.yaml", out)
	if err != nil {
		t.Fatalf("Parse(YAML()) error: %v\n%s", err, out)
	}
	if a, b := withoutLines(s), withoutLines(back); !reflect.DeepEqual(a, b) {
		t.Fatalf("Parse(YAML()) =\n%+v\nwant\n%+v\nYAML:\n%s", b, a, out)
	}
	if again := back.YAML(); string(again) != string(out) {
		t.Fatalf("YAML() is not a fixed point:\n%s\nthen\n%s", out, again)
	}
}

func withoutLines(s *Spec) *Spec {
	c := *s
	c.Stragglers = append([]Straggler(nil), s.Stragglers...)
	for i := range c.Stragglers {
		c.Stragglers[i].Line = 0
	}
	c.Script = append([]ScriptStep(nil), s.Script...)
	for i := range c.Script {
		c.Script[i].Line = 0
	}
	return &c
}

func TestYAMLCanonical(t *testing.T) {
	s, err := Parse("spec.yaml", []byte("name: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := `name: x
model:
  kind: mlp
  hidden: [128]
data:
  kind: mnist
  epochs: 1
  batches_per_shard: 10
  seed: 1
train:
  global_batch: 256
  lr: 0.1
  optimizer: sgd
cluster:
  servers: 1
  workers: 1
  block_bytes: 4194304
  assignment: round-robin
  exchange: ps
  transport: tcp
  data_plane_encryption: off
  elasticity: hot
  snapshot_interval: 30s
sync:
  model: bsp
  staleness: 3
  pull: lazy
  pssp: {c: 0.5, alpha: 1, dynamic: false}
  drop: {wait_for: 1}
policies:
  toy: {mode: off, ratio: 1.5, window: 5s, count: 1, limit: 0, flag: false}
`
	if got := string(s.YAML()); got != want {
		t.Errorf("YAML() =\n%s\nwant\n%s", got, want)
	}
}

func TestNodesAndBatches(t *testing.T) {
	s := defaults()
	s.Cluster.Servers, s.Cluster.Workers, s.Train.GlobalBatch = 2, 3, 10
	if got, want := s.WorkerNames(), []string{"worker-0", "worker-1", "worker-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("WorkerNames() = %v; want %v", got, want)
	}
	if got, want := s.ServerNames(), []string{"server-0", "server-1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ServerNames() = %v; want %v", got, want)
	}
	for i, want := range []int{4, 3, 3, 0} {
		if got := s.LocalBatch(i); got != want {
			t.Errorf("LocalBatch(%d) = %d; want %d (even split of 10 over 3)", i, got, want)
		}
	}
	s.Cluster.BatchSizes = map[string]int{"worker-0": 1, "worker-1": 1, "worker-2": 8}
	if got := s.LocalBatch(2); got != 8 {
		t.Errorf("LocalBatch(2) = %d; want 8 from batch_sizes", got)
	}
	for _, tt := range []struct {
		total, n int
		want     []int
	}{{10, 3, []int{4, 3, 3}}, {256, 4, []int{64, 64, 64, 64}}, {5, 5, []int{1, 1, 1, 1, 1}}, {1, 0, nil}} {
		if got := EvenSplit(tt.total, tt.n); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("EvenSplit(%d, %d) = %v; want %v", tt.total, tt.n, got, tt.want)
		}
	}
}

func TestRates(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want float64
		fmt  string
	}{
		{"20MiB/s", 20 << 20, "20MiB/s"},
		{"500KB/s", 500e3, "500KB/s"},
		{"1GB/s", 1e9, "1GB/s"},
		{"1.5 MiB/s", 1.5 * (1 << 20), "1536KiB/s"},
		{"1024", 1024, "1KiB/s"},
		{"100b/s", 100, "100B/s"},
		{"2.5B/s", 2.5, "2.5B/s"},
	} {
		got, err := ParseRate(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			continue
		}
		if f := FormatRate(got); f != tt.fmt {
			t.Errorf("FormatRate(%v) = %q; want %q", got, f, tt.fmt)
		}
	}
	for _, in := range []string{"fast", "20MiB", "20XB/s", "/s", "1e999GB/s"} {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %v, nil; want an error", in, got)
		}
	}
}

func TestSuggest(t *testing.T) {
	keys := []string{"model", "staleness", "pull", "pssp", "drop"}
	for _, tt := range []struct{ in, want string }{
		{"modle", "model"}, {"stalness", "staleness"}, {"pul", "pull"}, {"PSSP", "pssp"}, {"banana", ""}, {"x", ""},
	} {
		if got := suggest(tt.in, keys); got != tt.want {
			t.Errorf("suggest(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestErrorFields(t *testing.T) {
	_, err := Parse("jobs/a.yaml", []byte("name: a\ncluster:\n  workers: 0\n"))
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 {
		t.Fatalf("Parse error = %v; want one Errors entry", err)
	}
	want := Error{File: "jobs/a.yaml", Line: 3, Path: "cluster.workers", Msg: "must be at least 1 (got 0)"}
	if *es[0] != want {
		t.Errorf("Parse error = %+v; want %+v", *es[0], want)
	}
}

func TestClusterResources(t *testing.T) {
	base := "name: r\nmodel: {kind: softmax}\ndata: {kind: mnist}\ncluster:\n  servers: 1\n  workers: 2\n  resources:\n"
	s, err := Parse("r.yaml", []byte(base+"    server: {cpu: \"1\", memory: 1Gi}\n    worker: {cpu: 500m}\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := Resources{Server: RoleResources{CPU: "1", Memory: "1Gi"}, Worker: RoleResources{CPU: "500m"}}
	if s.Cluster.Resources != want {
		t.Fatalf("resources = %+v; want %+v", s.Cluster.Resources, want)
	}
	again, err := Parse("r.yaml", s.YAML())
	if err != nil || again.Cluster.Resources != want {
		t.Fatalf("round trip: %+v, %v; want %+v", again.Cluster.Resources, err, want)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"    worker: {memory: lots}\n", `r.yaml:8: cluster.resources.worker.memory: must be a Kubernetes quantity`},
		{"    server: {gpu: 1}\n", `cluster.resources.server.gpu`},
		{"    ps: {cpu: 1}\n", `cluster.resources.ps`},
	} {
		_, err := Parse("r.yaml", []byte(base+tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}
