// Package job turns a parsed job spec into the runtime's pieces that every
// role must agree on: the model's tensors, the parameter-block table, the
// synchronization and optimizer settings, the injected stragglers, and the
// iteration plan (which stream positions each worker trains on in each
// iteration).
//
// Every process of a job derives these from the same spec text, so they agree
// without shipping tensors around. The package is pure: it converts block
// tables and sync settings to and from their wire form, but does no I/O, and
// it imports neither the model's math (runtime/model) nor the data loaders
// (runtime/data): tensor shapes come from core/shape. That is what lets
// the scheduler, which lays out blocks and plans iterations but never trains,
// use it (docs/design.md: "scheduler ──▶ proto, runtime's pure packages").
package job

import (
	"fmt"
	"slices"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/shape"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/proto/pspb"
)

// MNIST's fixed shape.
const (
	mnistTrain   = 60000
	mnistDim     = 28 * 28
	mnistClasses = 10
)

// DataInfo is the shape of the job's data, known without loading it.
func DataInfo(s *spec.Spec) shape.Input {
	if s.Data.Kind == "synthetic-ctr" {
		return shape.Input{Sparse: true, Features: s.Data.Features, Classes: 2}
	}
	return shape.Input{Dim: mnistDim, Classes: mnistClasses}
}

// TrainSamples is the number of training samples of one epoch.
func TrainSamples(s *spec.Spec) int {
	if s.Data.Kind == spec.DataSyntheticCTR || s.Data.Kind == spec.DataTorch {
		return s.Data.Samples
	}
	return mnistTrain
}

// Tensors is the job's model's parameter tensors, computed from the spec
// (runtime/model builds the same from the same spec).
func Tensors(s *spec.Spec) ([]blocks.Tensor, error) {
	if s.Model.Kind == spec.ModelTorch {
		// Computed from the script when the spec was submitted.
		if len(s.Model.Tensors) == 0 || s.Data.Samples <= 0 {
			return nil, fmt.Errorf("model: the torch spec lacks model.tensors or data.samples: submit it with `kelpie run` or `kelpie job submit`, which compute them by running %s once", s.Model.Script)
		}
		out := make([]blocks.Tensor, 0, len(s.Model.Tensors))
		for _, t := range s.Model.Tensors {
			out = append(out, blocks.Tensor{Name: t.Name, Rows: t.Rows, Cols: t.Cols, Sparse: t.Sparse})
		}
		return out, nil
	}
	ts, err := shape.Of(s.Model.Kind, s.Model.Hidden, DataInfo(s))
	if err != nil {
		return nil, err
	}
	out := make([]blocks.Tensor, 0, len(ts))
	for _, t := range ts {
		out = append(out, blocks.Tensor{Name: t.Name, Rows: t.Rows, Cols: t.Cols, Sparse: t.Sparse})
	}
	return out, nil
}

// Strategy maps the spec's assignment name to a block strategy. PSLD starts
// from a size-balanced table and is then driven by the scheduler.
func Strategy(s *spec.Spec) blocks.Strategy {
	switch s.Cluster.Assignment {
	case "size-balanced", "psld":
		return blocks.SizeBalanced
	case "mxnet":
		return blocks.MXNet
	default:
		return blocks.RoundRobin
	}
}

// Table lays out the model's blocks and assigns them to the job's servers
// (an empty table for a job without servers).
func Table(s *spec.Spec) (blocks.Table, error) {
	if s.Cluster.Servers == 0 {
		// Allreduce (exchange ring or rat): no servers, no blocks to place.
		return blocks.Table{Version: 1}, nil
	}
	ts, err := Tensors(s)
	if err != nil {
		return blocks.Table{}, err
	}
	bs, err := blocks.Layout(ts, s.Cluster.BlockBytes, s.Cluster.Servers, Strategy(s))
	if err != nil {
		return blocks.Table{}, err
	}
	return blocks.Assign(bs, s.Cluster.Servers, Strategy(s), s.Data.Seed)
}

// InitBlock returns the initial values of one block: a slice of the model's
// seeded dense initialisation, or zero rows of the sparse table.
func InitBlock(init [][]float32, b blocks.Block) []float32 {
	if b.Sparse {
		return make([]float32, b.Floats())
	}
	src := init[b.Tensor][b.Offset : b.Offset+b.Length]
	return append([]float32(nil), src...)
}

// SyncConfig is the servers' synchronization model.
func SyncConfig(s *spec.Spec) syncmodel.Config {
	return syncmodel.Config{
		Model:       syncmodel.Kind(s.Sync.Model),
		Staleness:   s.Sync.Staleness,
		Pull:        syncmodel.PullMode(s.Sync.Pull),
		PSSPC:       s.Sync.PSSP.C,
		PSSPAlpha:   s.Sync.PSSP.Alpha,
		PSSPDynamic: s.Sync.PSSP.Dynamic,
		DropWaitFor: s.Sync.Drop.WaitFor,
	}
}

// SyncFrom converts wire sync settings (a SET_SYNC command) into the
// servers' synchronization model.
func SyncFrom(w *pspb.SyncSettings) syncmodel.Config {
	return syncmodel.Config{Model: syncmodel.Kind(w.Model), Staleness: int(w.Staleness), Pull: syncmodel.PullMode(w.Pull),
		PSSPC: w.PsspC, PSSPAlpha: w.PsspAlpha, PSSPDynamic: w.PsspDynamic, DropWaitFor: int(w.DropWaitFor)}
}

// OptimConfig is the servers' optimizer.
func OptimConfig(s *spec.Spec) optim.Config {
	return optim.Config{Kind: s.Train.Optimizer, LR: float32(s.Train.LR), Momentum: float32(s.Train.Momentum),
		Decay: s.Train.LRDecay, Final: float32(s.Train.LRFinal), Steps: NewPlan(s, TrainSamples(s)).Iterations()}
}

// Injections converts the spec's stragglers.
func Injections(s *spec.Spec) []straggler.Injection {
	var out []straggler.Injection
	for _, g := range s.Stragglers {
		out = append(out, straggler.Injection{
			Node: g.Node, Kind: straggler.Kind(g.Kind), Sleep: g.Sleep, Intensity: g.Intensity,
			Probability: g.Probability, Start: g.Start, End: g.End, Period: g.Period, On: g.On,
			Rate: g.Rate, Region: g.Region, FollowsRestart: g.FollowsRestart, CuredByRestart: g.CuredByRestart,
		})
	}
	return out
}

// Plan is the iteration plan: the training stream is E epochs of per-epoch
// permutations of the N training samples, cut into global batches of B; in
// each iteration worker i takes its slice of the global batch (after the
// slices of workers 0..i-1). The last iteration may be short.
//
// Local batch sizes may change at an iteration boundary (ADJUST_BS) while
// the global batch stays B (AntDT Eq. 2): Changes lists the new splits in
// iteration order. Every worker must apply a change at the same iteration,
// which is what the action protocol guarantees.
type Plan struct {
	N, Epochs, GlobalBatch int
	Seed                   int64
	Local                  []int // local batch size per worker from iteration 0
	BatchesPerShard        int
	Changes                []Split
}

// Split is a new set of local batch sizes from iteration From on.
type Split struct {
	From  int64
	Local []int
}

// LocalAt is the split in force at iteration t.
func (p Plan) LocalAt(t int64) []int {
	local := p.Local
	for _, c := range p.Changes {
		if c.From <= t {
			local = c.Local
		}
	}
	return local
}

// LocalOf is worker w's local batch size at iteration t: 0 for a worker
// that the split in force does not cover (added later, or removed).
func (p Plan) LocalOf(t int64, w int) int {
	local := p.LocalAt(t)
	if w < 0 || w >= len(local) {
		return 0
	}
	return local[w]
}

// WithSplit returns the plan with local sizes changed from iteration from
// on, by worker index; the sizes must sum to the global batch. A split may
// cover more workers than the job started with (workers added while it
// runs); a worker it does not cover, or gives 0, trains on nothing.
func (p Plan) WithSplit(from int64, local []int) (Plan, error) {
	if len(local) == 0 {
		return p, fmt.Errorf("job: empty split")
	}
	sum := 0
	for _, b := range local {
		if b < 0 {
			return p, fmt.Errorf("job: split %v has a negative size", local)
		}
		sum += b
	}
	if sum != p.GlobalBatch {
		return p, fmt.Errorf("job: split %v sums to %d, not the global batch %d", local, sum, p.GlobalBatch)
	}
	var kept []Split
	for _, c := range p.Changes {
		if c.From < from {
			kept = append(kept, c)
		}
	}
	p.Changes = append(kept, Split{From: from, Local: append([]int(nil), local...)})
	return p, nil
}

// NewPlan builds the plan of a spec for a training set of n samples.
func NewPlan(s *spec.Spec, n int) Plan {
	p := Plan{N: n, Epochs: s.Data.Epochs, GlobalBatch: s.Train.GlobalBatch, Seed: s.Data.Seed,
		BatchesPerShard: s.Data.BatchesPerShard}
	for i := range s.Cluster.Workers {
		p.Local = append(p.Local, s.LocalBatch(i))
	}
	return p
}

// Total is the number of samples the job trains on.
func (p Plan) Total() int64 { return int64(p.N) * int64(p.Epochs) }

// Iterations is the number of global iterations.
func (p Plan) Iterations() int64 {
	b := int64(p.GlobalBatch)
	return (p.Total() + b - 1) / b
}

// Slice is worker w's range of stream positions in iteration t.
func (p Plan) Slice(w int, t int64) (from, to int64) {
	local := p.LocalAt(t)
	off := int64(0)
	for i := 0; i < min(w, len(local)); i++ {
		off += int64(local[i])
	}
	from = t*int64(p.GlobalBatch) + off
	to = min(from+int64(p.LocalOf(t, w)), p.Total())
	from = min(from, to)
	return from, to
}

// TableFrom converts a wire assignment into a block table.
func TableFrom(a *coordinatorpb.Assignment) blocks.Table {
	t := blocks.Table{Version: a.Version, Servers: len(a.Servers)}
	for i, b := range a.Blocks {
		blk := blocks.Block{ID: int(b.Id), Tensor: int(b.Tensor), Offset: b.Offset, Length: b.Length, Sparse: b.Sparse, Cols: 1}
		if b.Sparse {
			blk.Cols = int(b.Cols)
		}
		t.Blocks = append(t.Blocks, blk)
		t.ServerOf = append(t.ServerOf, int(a.ServerOf[i]))
	}
	return t
}

// Assignment is the wire form of a block table with the servers' addresses
// and names. It copies addrs and names: the message is marshalled later,
// outside the caller's lock, while the caller may fill in an address.
func Assignment(t blocks.Table, addrs, names []string) *coordinatorpb.Assignment {
	a := &coordinatorpb.Assignment{Version: t.Version, Servers: slices.Clone(addrs), ServerNames: slices.Clone(names)}
	for i, b := range t.Blocks {
		a.Blocks = append(a.Blocks, &coordinatorpb.Block{Id: uint32(b.ID), Tensor: uint32(b.Tensor), Offset: b.Offset,
			Length: b.Length, Sparse: b.Sparse, Cols: int32(b.Cols)})
		a.ServerOf = append(a.ServerOf, int32(t.ServerOf[i]))
	}
	return a
}
