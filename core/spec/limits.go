package spec

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Limits are upper (and a few lower) bounds on the sizes a spec may ask for,
// so that a typo or a hostile spec is refused with the key and line instead
// of forking a hundred thousand agents or asking a server for terabytes.
// A scheduler for a big cluster raises them (kelpie scheduler --spec-limit
// NAME=N); every bound is checked while validating, never later at submit.
type Limits struct {
	SpecBytes     int64 // the spec's text
	Workers       int64 // cluster.workers, min/max_workers, with scripted adds
	Servers       int64 // cluster.servers, min/max_servers, with scripted adds
	HiddenLayers  int64 // entries of model.hidden
	HiddenWidth   int64 // each entry of model.hidden
	Params        int64 // the model's parameters (floats), dense and sparse
	Features      int64 // data.features (sparse-lr rows)
	Fields        int64 // data.fields
	MinBlockBytes int64 // cluster.block_bytes at least
	MaxBlockBytes int64 // cluster.block_bytes at most
	Blocks        int64 // parameter blocks the model is cut into
	Samples       int64 // data.samples and data.test_samples
	Epochs        int64 // data.epochs
	GlobalBatch   int64 // train.global_batch
	Shards        int64 // data shards over all epochs
	Stragglers    int64 // entries of stragglers
	Script        int64 // entries of script
}

// DefaultLimits are the bounds of a stock scheduler and of kelpie run: a
// generous single cluster, far below what would exhaust a machine.
func DefaultLimits() Limits {
	return Limits{
		SpecBytes:     1 << 20,
		Workers:       1024,
		Servers:       256,
		HiddenLayers:  16,
		HiddenWidth:   1 << 16,
		Params:        1 << 28, // 1 GiB of float32
		Features:      1 << 28,
		Fields:        1 << 12,
		MinBlockBytes: 1 << 10,
		MaxBlockBytes: 256 << 20,
		Blocks:        1 << 20,
		Samples:       1 << 27,
		Epochs:        1000,
		GlobalBatch:   1 << 20,
		Shards:        1 << 20, // scheduler/shard.MaxShards
		Stragglers:    1024,
		Script:        1024,
	}
}

// limitNames maps the names used by --spec-limit to the fields of Limits.
func (l *Limits) fields() map[string]*int64 {
	return map[string]*int64{
		"spec_bytes": &l.SpecBytes, "workers": &l.Workers, "servers": &l.Servers,
		"hidden_layers": &l.HiddenLayers, "hidden_width": &l.HiddenWidth, "params": &l.Params,
		"features": &l.Features, "fields": &l.Fields, "min_block_bytes": &l.MinBlockBytes,
		"max_block_bytes": &l.MaxBlockBytes, "blocks": &l.Blocks, "samples": &l.Samples,
		"epochs": &l.Epochs, "global_batch": &l.GlobalBatch, "shards": &l.Shards,
		"stragglers": &l.Stragglers, "script": &l.Script,
	}
}

// LimitNames lists the names Set accepts, sorted.
func LimitNames() []string {
	var l Limits
	names := make([]string, 0, 20)
	for k := range l.fields() {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Set changes one bound from "name=value" (value a positive integer).
func (l *Limits) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("spec limit %q: want NAME=N (names: %s)", kv, strings.Join(LimitNames(), ", "))
	}
	f, ok := l.fields()[strings.ReplaceAll(strings.TrimSpace(k), "-", "_")]
	if !ok {
		return fmt.Errorf("spec limit %q: unknown name %q (names: %s)", kv, k, strings.Join(LimitNames(), ", "))
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 1 {
		return fmt.Errorf("spec limit %q: value must be a positive integer", kv)
	}
	*f = n
	return nil
}

// String lists every bound as name=value.
func (l Limits) String() string {
	f := l.fields()
	parts := make([]string, 0, len(f))
	for _, k := range LimitNames() {
		parts = append(parts, fmt.Sprintf("%s=%d", k, *f[k]))
	}
	return strings.Join(parts, " ")
}

// Unlimited are bounds no spec reaches: for specs a scheduler has already
// admitted under its own limits (roles, restored jobs).
func Unlimited() Limits {
	var l Limits
	for _, f := range l.fields() {
		*f = math.MaxInt64
	}
	l.MinBlockBytes = 4 // one float
	return l
}

// atMost reports got above max at path.
func (c *checker) atMost(path string, got, max int64, what string) bool {
	if got > max {
		c.errorf(path, "must be at most %d (got %d); %s", max, got, limitHint(what))
		return false
	}
	return true
}

// LimitHint begins the message of every error about a bound of Limits
// (followed by the bound's name), so that a client which checked a spec
// without the scheduler's bounds can pick those errors out of its refusal.
const LimitHint = "the limit is the scheduler's --spec-limit "

func limitHint(name string) string {
	return LimitHint + name
}

// mnist's shape, as core/job knows it (pure constants).
const (
	mnistDim     = 28 * 28
	mnistClasses = 10
	mnistSamples = 60000
)

// validateLimits checks every size against c.lim. It runs after the other
// checks and reports each bound at the key that exceeds it.
func (c *checker) validateLimits() {
	s, l := c.s, c.lim
	cl := s.Cluster

	// Nodes: the job's start, its EPS maximum and every scripted add.
	addW, addS := 0, 0
	for _, st := range s.Script {
		switch st.Action {
		case ActionAddWorker:
			addW++
		case ActionAddServer:
			addS++
		}
	}
	if c.atMost("cluster.workers", int64(cl.Workers), l.Workers, "workers") &&
		c.atMost("cluster.max_workers", int64(cl.MaxWorkers), l.Workers, "workers") && addW > 0 &&
		int64(cl.Workers+addW) > l.Workers {
		c.errorf("script", "adds %d workers to %d: more than %d; %s", addW, cl.Workers, l.Workers, limitHint("workers"))
	}
	if c.atMost("cluster.servers", int64(cl.Servers), l.Servers, "servers") &&
		c.atMost("cluster.max_servers", int64(cl.MaxServers), l.Servers, "servers") && addS > 0 &&
		int64(cl.Servers+addS) > l.Servers {
		c.errorf("script", "adds %d servers to %d: more than %d; %s", addS, cl.Servers, l.Servers, limitHint("servers"))
	}
	// Spare hosts are simulated hosts a node may be restarted on: no more
	// than the workers a job may have.
	c.atMost("cluster.spare_hosts", int64(cl.SpareHosts), l.Workers, "workers")
	c.atMost("stragglers", int64(len(s.Stragglers)), l.Stragglers, "stragglers")
	c.atMost("script", int64(len(s.Script)), l.Script, "script")

	// Block size both ways.
	blockOK := cl.BlockBytes >= 1
	if blockOK && cl.BlockBytes < l.MinBlockBytes {
		c.errorf("cluster.block_bytes", "must be at least %d (got %d); %s", l.MinBlockBytes, cl.BlockBytes, limitHint("min_block_bytes"))
		blockOK = false
	}
	blockOK = blockOK && c.atMost("cluster.block_bytes", cl.BlockBytes, l.MaxBlockBytes, "max_block_bytes")

	// The model: widths, then its parameter count and blocks.
	params, tensors, paramsKey := int64(0), int64(0), ""
	switch s.Model.Kind {
	case ModelMLP, ModelSoftmax:
		if s.Model.Kind == ModelMLP {
			paramsKey = "model.hidden"
			if !c.atMost("model.hidden", int64(len(s.Model.Hidden)), l.HiddenLayers, "hidden_layers") {
				return
			}
		} else {
			paramsKey = "model.kind"
		}
		in, ok := int64(mnistDim), true
		for i, h := range s.Model.Hidden {
			if !c.atMost(indexPath("model.hidden", i), int64(h), l.HiddenWidth, "hidden_width") || h < 1 {
				ok = false
				continue
			}
			params = satAdd(params, satMul(in+1, int64(h)))
			tensors += 2
			in = int64(h)
		}
		if !ok {
			return
		}
		params = satAdd(params, satMul(in+1, mnistClasses))
		tensors += 2
	case ModelSparseLR:
		paramsKey = "data.features"
		if s.Data.Features > uint64(l.Features) {
			c.errorf("data.features", "must be at most %d (got %d); %s", l.Features, s.Data.Features, limitHint("features"))
			return
		}
		c.atMost("data.fields", int64(s.Data.Fields), l.Fields, "fields")
		params, tensors = int64(s.Data.Features)+1, 2
	}
	if params > l.Params {
		c.errorf(paramsKey, "the model would have %d parameters (%d MiB): more than %d; %s",
			params, params>>18, l.Params, limitHint("params"))
	} else if blockOK && params > 0 {
		// Each tensor is cut into blocks of at most block_bytes.
		blocks := satMul(params, 4)/cl.BlockBytes + tensors
		if blocks > l.Blocks {
			c.errorf("cluster.block_bytes", "cuts the model's %d parameters into about %d blocks: more than %d; raise block_bytes (%s)",
				params, blocks, l.Blocks, limitHint("blocks"))
		}
	}

	// Data: samples, epochs, batch, and the shards they make.
	samples := int64(mnistSamples)
	if s.Data.Kind == DataSyntheticCTR {
		samples = int64(s.Data.Samples)
		if !c.atMost("data.samples", samples, l.Samples, "samples") {
			samples = 0
		}
		c.atMost("data.test_samples", int64(s.Data.TestSamples), l.Samples, "samples")
	}
	epochsOK := c.atMost("data.epochs", int64(s.Data.Epochs), l.Epochs, "epochs")
	batchOK := c.atMost("train.global_batch", int64(s.Train.GlobalBatch), l.GlobalBatch, "global_batch")
	bps := int64(s.Data.BatchesPerShard)
	if !c.atMost("data.batches_per_shard", bps, satMul(l.Shards, l.GlobalBatch), "shards") {
		return
	}
	if epochsOK && batchOK && samples >= 1 && s.Data.Epochs >= 1 && s.Train.GlobalBatch >= 1 && bps >= 1 {
		size := satMul(int64(s.Train.GlobalBatch), bps)
		perEpoch := samples/size + min(samples%size, 1)
		if total := satMul(perEpoch, int64(s.Data.Epochs)); total > l.Shards {
			c.errorf("data.batches_per_shard", "%d epochs of %d shards make %d shards: more than %d; raise batches_per_shard (%s)",
				s.Data.Epochs, perEpoch, total, l.Shards, limitHint("shards"))
		}
	}
}

// satMul and satAdd are a*b and a+b for non-negative values, saturating at
// math.MaxInt64, so that raised limits cannot overflow a check.
func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
