package spec

import (
	"slices"
	"time"
)

// Defaults for keys a spec leaves out. The package doc lists them all.
const (
	defaultHidden           = 128
	defaultThreads          = 1 // a torch child's threads: workers share few cores
	defaultEpochs           = 1
	defaultBatchesPerShard  = 10
	defaultSeed             = 1
	defaultSamples          = 200000
	defaultTestSamples      = 20000
	defaultFeatures         = 100000
	defaultFields           = 8
	defaultGlobalBatch      = 256
	defaultLR               = 0.1
	defaultMomentum         = 0.9
	defaultServers          = 1
	defaultWorkers          = 1
	defaultBlockBytes       = 4 << 20 // PSLD's best partition unit
	defaultSnapshotInterval = 30 * time.Second
	defaultStaleness        = 3
	defaultPSSPC            = 0.5
	defaultPSSPAlpha        = 1.0
	defaultIntensity        = 1
	defaultProbability      = 1
)

// applyDefaults fills every key the spec left out.
func (d *decoder) applyDefaults(s *Spec) {
	set := func(path string, dst any, v any) {
		if d.given(path) {
			return
		}
		switch p := dst.(type) {
		case *int:
			*p = v.(int)
		case *int64:
			*p = v.(int64)
		case *uint64:
			*p = v.(uint64)
		case *float64:
			*p = v.(float64)
		case *string:
			*p = v.(string)
		case *time.Duration:
			*p = v.(time.Duration)
		}
	}

	// model.kind and data.kind default from each other: sparse-lr trains on
	// synthetic-ctr, the dense models on mnist.
	if !d.given("model.kind") {
		s.Model.Kind = ModelMLP
		if d.given("data.kind") && s.Data.Kind == DataSyntheticCTR {
			s.Model.Kind = ModelSparseLR
		}
	}
	if s.Model.Kind == ModelTorch {
		set("model.threads", &s.Model.Threads, defaultThreads)
	}
	if !d.given("data.kind") {
		s.Data.Kind = DataMNIST
		switch s.Model.Kind {
		case ModelSparseLR:
			s.Data.Kind = DataSyntheticCTR
		case ModelTorch:
			s.Data.Kind = DataTorch
		}
	}
	if s.Model.Kind == ModelMLP && !d.given("model.hidden") {
		s.Model.Hidden = []int{defaultHidden}
	}

	set("data.epochs", &s.Data.Epochs, defaultEpochs)
	set("data.batches_per_shard", &s.Data.BatchesPerShard, defaultBatchesPerShard)
	set("data.seed", &s.Data.Seed, int64(defaultSeed))
	if s.Data.Kind == DataSyntheticCTR {
		set("data.samples", &s.Data.Samples, defaultSamples)
		set("data.test_samples", &s.Data.TestSamples, defaultTestSamples)
		set("data.features", &s.Data.Features, uint64(defaultFeatures))
		set("data.fields", &s.Data.Fields, defaultFields)
	}

	set("train.global_batch", &s.Train.GlobalBatch, defaultGlobalBatch)
	set("train.lr", &s.Train.LR, defaultLR)
	set("train.optimizer", &s.Train.Optimizer, OptimizerSGD)
	if s.Train.Optimizer == OptimizerMomentum {
		set("train.momentum", &s.Train.Momentum, defaultMomentum)
	}
	set("train.lr_decay", &s.Train.LRDecay, LRDecayNone)

	c := &s.Cluster
	set("cluster.exchange", &c.Exchange, ExchangePS)
	// Allreduce (ring, rat) needs no parameter servers.
	servers, minServers := defaultServers, 1
	if c.Exchange == ExchangeRing || c.Exchange == ExchangeRAT {
		servers, minServers = 0, 0
	}
	set("cluster.servers", &c.Servers, servers)
	set("cluster.workers", &c.Workers, defaultWorkers)
	set("cluster.block_bytes", &c.BlockBytes, int64(defaultBlockBytes))
	set("cluster.assignment", &c.Assignment, AssignRoundRobin)
	set("cluster.transport", &c.Transport, TransportTCP)
	set("cluster.data_plane_encryption", &c.DataPlaneEncryption, EncryptionOff)
	set("cluster.elasticity", &c.Elasticity, ElasticityHot)
	set("cluster.snapshot_interval", &c.SnapshotInterval, defaultSnapshotInterval)
	set("cluster.min_workers", &c.MinWorkers, 1)
	set("cluster.min_servers", &c.MinServers, minServers)
	if len(c.Topology) == 0 {
		c.Topology = nil
	}

	base := Sync{
		Model:     SyncBSP,
		Staleness: defaultStaleness,
		Pull:      PullLazy,
		PSSP:      PSSP{C: defaultPSSPC, Alpha: defaultPSSPAlpha},
		Drop:      Drop{WaitFor: max(c.Workers-1, 1)},
	}
	d.fillSync(&s.Sync, base, "sync")

	d.defaultPolicies(s)

	for i := range s.Stragglers {
		st := &s.Stragglers[i]
		path := indexPath("stragglers", i)
		switch st.Kind {
		case StragglerCompute:
			set(path+".intensity", &st.Intensity, float64(defaultIntensity))
			set(path+".probability", &st.Probability, float64(defaultProbability))
		case StragglerCPU, StragglerCPUSleep:
			set(path+".probability", &st.Probability, float64(defaultProbability))
		}
	}

	created := createdNodes(s)
	for i := range s.Script {
		st := &s.Script[i]
		path := indexPath("script", i)
		switch st.Action {
		case ActionAddServer, ActionAddWorker:
			set(path+".node", &st.Node, created[i])
		case ActionSetSync:
			if st.Sync == nil {
				st.Sync = &Sync{}
			}
			d.fillSync(st.Sync, s.Sync, path)
		}
	}
}

// fillSync sets the sync keys under prefix that were not given from base.
func (d *decoder) fillSync(sy *Sync, base Sync, prefix string) {
	if !d.given(prefix + ".model") {
		sy.Model = base.Model
	}
	if !d.given(prefix + ".staleness") {
		sy.Staleness = base.Staleness
	}
	if !d.given(prefix + ".pull") {
		sy.Pull = base.Pull
	}
	if !d.given(prefix + ".pssp.c") {
		sy.PSSP.C = base.PSSP.C
	}
	if !d.given(prefix + ".pssp.alpha") {
		sy.PSSP.Alpha = base.PSSP.Alpha
	}
	if !d.given(prefix + ".pssp.dynamic") {
		sy.PSSP.Dynamic = base.PSSP.Dynamic
	}
	if !d.given(prefix + ".drop.wait_for") {
		sy.Drop.WaitFor = base.Drop.WaitFor
	}
}

// scriptOrder returns the indices of s.Script in the order the steps run:
// by time, and in file order at equal times.
func scriptOrder(s *Spec) []int {
	order := make([]int, len(s.Script))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch ta, tb := s.Script[a].At, s.Script[b].At; {
		case ta < tb:
			return -1
		case ta > tb:
			return 1
		}
		return 0
	})
	return order
}

// createdNodes gives, for each add-server and add-worker step, the name of
// the node it creates: the n-th add-server (in running order) creates
// server-<servers+n>, and likewise for workers. Names are never reused.
func createdNodes(s *Spec) []string {
	names := make([]string, len(s.Script))
	nextServer, nextWorker := s.Cluster.Servers, s.Cluster.Workers
	for _, i := range scriptOrder(s) {
		switch s.Script[i].Action {
		case ActionAddServer:
			names[i] = ServerName(nextServer)
			nextServer++
		case ActionAddWorker:
			names[i] = WorkerName(nextWorker)
			nextWorker++
		}
	}
	return names
}
