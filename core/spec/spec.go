package spec

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Spec is one parsed, defaulted and validated job spec.
type Spec struct {
	Name       string
	Model      Model
	Data       Data
	Train      Train
	Cluster    Cluster
	Sync       Sync
	Policies   Policies
	Stragglers []Straggler
	Script     []ScriptStep
}

// Model is the model a job trains.
type Model struct {
	Kind   string // softmax | mlp | sparse-lr | torch
	Hidden []int  // mlp only: hidden layer widths
	// torch only: the user's PyTorch script (relative to the spec's
	// directory; `kelpie run` and `kelpie job submit` make it absolute),
	// the threads its child process may use, and the module's parameter
	// tensors, which those commands compute by running the script's
	// model() once (runtime/torch) so that no other process needs Python to
	// lay out blocks.
	Script  string
	Threads int
	Tensors []Tensor
}

// Tensor is one parameter tensor of a torch model: a dense one is Rows by
// Cols floats (a scalar or vector has Rows 1; higher dimensions are folded
// into Cols), a sparse one an embedding table of Rows keys of Cols values.
type Tensor struct {
	Name       string
	Rows, Cols int
	Sparse     bool
	Line       int // line in the spec file (0 when computed)
}

// Data is the data set a job trains on and how it is cut into shards.
type Data struct {
	Kind            string // mnist | synthetic-ctr
	Epochs          int
	BatchesPerShard int // M in AntDT: batches per data shard
	Seed            int64

	// synthetic-ctr only; zero for mnist unless given (mnist ignores them).
	Samples     int
	TestSamples int
	Features    uint64 // width of the sparse feature space
	Fields      int    // non-zero features per sample
}

// Train holds the optimisation settings.
type Train struct {
	GlobalBatch int
	LR          float64
	Optimizer   string  // sgd | momentum | adam
	Momentum    float64 // momentum only
	// LRDecay lowers lr over the job's iterations: none | cosine | linear,
	// to LRFinal·lr at the last one.
	LRDecay string
	LRFinal float64
	// HangMin and HangFactor set when the job counts as hung
	// (scheduler/hang): no progress for max(HangMin, HangFactor × its
	// median iteration time). Zero: the scheduler's --hang-min and
	// --hang-factor (by default 30 s and 20).
	HangMin    time.Duration
	HangFactor float64
}

// Cluster is the shape of the job's cluster.
type Cluster struct {
	Servers    int
	Workers    int
	BlockBytes int64
	Assignment string // round-robin | size-balanced | psld | mxnet
	Exchange   string // ps | ring | rat
	Transport  string // tcp | grpc: what carries tensors between workers and servers
	// DataPlaneEncryption is off | on: whether tensors between workers
	// and servers travel in TLS (tcp transport: on TCP connections; gRPC
	// has TLS whenever nodes have certificates).
	DataPlaneEncryption string
	Elasticity          string // hot | checkpoint-restart
	SnapshotInterval    time.Duration
	// Topology gives region labels by node name; nil when not given.
	Topology map[string]Labels
	// Hosts places the nodes (HostsLocal, HostsNetns); Links shapes the
	// network of HostsNetns (network.go).
	Hosts string
	Links Links
	// SpareHosts is how many simulated hosts the local launcher keeps free
	// beside the one each node starts on (hosts.go): a KILL_RESTART
	// relaunches its node on a free one, leaving its host's injections
	// behind. 0: every restart is in place.
	SpareHosts int
	// BatchSizes gives each initial worker's local batch size; nil means the
	// global batch split evenly. Read it through LocalBatch.
	BatchSizes map[string]int
	// MinWorkers and MinServers are the least EPS multi-job scheduling may
	// shrink the job to (or launch it at); MaxWorkers and MaxServers the
	// most it may grow it to (0: no limit).
	MinWorkers, MaxWorkers int
	MinServers, MaxServers int
	// Resources are what each Pod of a role asks for when the job runs on
	// Kubernetes; the local launcher ignores them.
	Resources Resources
}

// Resources are the Kubernetes resources of each role's Pods.
type Resources struct {
	Server, Worker RoleResources
}

// RoleResources are one role's CPU and memory, as Kubernetes quantities
// ("500m", "2", "512Mi"); empty means none asked. They become the Pod's
// requests, and memory also its limit (a node that outgrows it is
// OOMKilled, which the launcher reports).
type RoleResources struct {
	CPU, Memory string
}

// Labels place a node in a region for topology-aware allreduce.
type Labels struct {
	Rack string
	Pod  string
	// Host puts the nodes that name the same host on one machine (with
	// hosts netns, one network namespace); by default every node is its
	// own host.
	Host string
}

// Sync is the synchronisation model the servers enforce.
type Sync struct {
	Model     string // bsp | asp | ssp | dsps | drop | pssp
	Staleness int    // s for ssp, pssp and dsps
	Pull      string // lazy | soft-barrier
	PSSP      PSSP
	Drop      Drop
}

// PSSP parameterises probabilistic SSP: a constant pass probability C, or
// with Dynamic the probability P(s,k) = Alpha/(1+e^(s-k)).
type PSSP struct {
	C       float64
	Alpha   float64
	Dynamic bool
}

// Drop parameterises drop-stragglers: an iteration completes once WaitFor
// (N_t) workers have pushed.
type Drop struct {
	WaitFor int
}

// Straggler is one injected slowness.
type Straggler struct {
	Node        string
	Kind        string        // compute | cpu | cpu-sleep | bandwidth | pause | link
	Sleep       time.Duration // compute: SleepDuration
	Intensity   float64       // compute, cpu
	Probability float64       // compute, cpu: per iteration
	Start       time.Duration
	End         time.Duration // zero: until the job ends
	Period      time.Duration // transient: active for On out of every Period
	On          time.Duration
	Rate        float64 // bandwidth, link: bytes per second
	// Region (link only, instead of Node) is a rack whose uplink is shaped.
	Region string
	// FollowsRestart keeps the injection on a node after a KILL_RESTART.
	FollowsRestart bool
	// CuredByRestart makes the slowness the process's own (a leak, a
	// stuck thread): a KILL_RESTART cures it, wherever the node runs next.
	CuredByRestart bool
	Line           int // line in the spec file
}

// ScriptStep is one timed operator action.
type ScriptStep struct {
	At     time.Duration
	Action string
	// Node is the target of remove-*, restart; for add-* it is the name of
	// the node the step creates (filled in when not given).
	Node       string
	Sizes      map[string]int // adjust-batch: every live worker's local batch
	Assignment string         // reassign: algorithm; empty keeps the current one
	Sync       *Sync          // set-sync: the new sync settings (job's sync for keys not given)
	Line       int            // line in the spec file
}

// Model kinds.
const (
	ModelSoftmax  = "softmax"
	ModelMLP      = "mlp"
	ModelSparseLR = "sparse-lr"
	ModelTorch    = "torch"
)

// Data kinds.
const (
	DataMNIST        = "mnist"
	DataSyntheticCTR = "synthetic-ctr"
	DataTorch        = "torch" // samples come from the torch script's train_set() and test_set()
)

// Optimizers.
const (
	OptimizerSGD      = "sgd"
	OptimizerMomentum = "momentum"
	OptimizerAdam     = "adam"
)

// Learning-rate decays (train.lr_decay).
const (
	LRDecayNone   = "none"
	LRDecayCosine = "cosine"
	LRDecayLinear = "linear"
)

// Block assignment algorithms.
const (
	AssignRoundRobin   = "round-robin"
	AssignSizeBalanced = "size-balanced"
	AssignPSLD         = "psld"
	AssignMXNet        = "mxnet"
)

// Data-plane transports.
const (
	TransportTCP  = "tcp"  // kelpie's framed transport (a Unix socket on one host)
	TransportGRPC = "grpc" // the parameter server's gRPC Exchange stream
)

// Data-plane encryption.
const (
	EncryptionOff = "off" // connections authenticated (the job's secret), tensors in the clear
	EncryptionOn  = "on"  // TLS with the node certificates on every framed TCP connection
)

// Gradient exchanges.
const (
	ExchangePS   = "ps"
	ExchangeRing = "ring"
	ExchangeRAT  = "rat"
)

// Elasticity mechanisms.
const (
	ElasticityHot               = "hot"
	ElasticityCheckpointRestart = "checkpoint-restart"
)

// Sync models.
const (
	SyncBSP  = "bsp"
	SyncASP  = "asp"
	SyncSSP  = "ssp"
	SyncDSPS = "dsps"
	SyncDrop = "drop"
	SyncPSSP = "pssp"
)

// Ways of serving delayed pull requests.
const (
	PullLazy        = "lazy"
	PullSoftBarrier = "soft-barrier"
)

// Policy modes.
const (
	ModeAuto    = "auto"
	ModeApprove = "approve"
	ModeOff     = "off"
)

// Straggler kinds.
const (
	StragglerCompute   = "compute"
	StragglerCPU       = "cpu"       // real contention: a competitor for the node's CPU (runtime/contend)
	StragglerCPUSleep  = "cpu-sleep" // the model: compute time stretched by sleeping
	StragglerBandwidth = "bandwidth"
	StragglerPause     = "pause"
	StragglerLink      = "link" // tc on the node's link or a rack's uplink (hosts netns)
)

// Script actions.
const (
	ActionAddServer    = "add-server"
	ActionRemoveServer = "remove-server"
	ActionAddWorker    = "add-worker"
	ActionRemoveWorker = "remove-worker"
	ActionRestart      = "restart"
	ActionAdjustBatch  = "adjust-batch"
	ActionReassign     = "reassign"
	ActionSetSync      = "set-sync"
)

var (
	modelKinds     = []string{ModelSoftmax, ModelMLP, ModelSparseLR, ModelTorch}
	dataKinds      = []string{DataMNIST, DataSyntheticCTR, DataTorch}
	optimizers     = []string{OptimizerSGD, OptimizerMomentum, OptimizerAdam}
	lrDecays       = []string{LRDecayNone, LRDecayCosine, LRDecayLinear}
	assignments    = []string{AssignRoundRobin, AssignSizeBalanced, AssignPSLD, AssignMXNet}
	exchanges      = []string{ExchangePS, ExchangeRing, ExchangeRAT}
	transports     = []string{TransportTCP, TransportGRPC}
	encryptions    = []string{EncryptionOff, EncryptionOn}
	elasticities   = []string{ElasticityHot, ElasticityCheckpointRestart}
	syncModels     = []string{SyncBSP, SyncASP, SyncSSP, SyncDSPS, SyncDrop, SyncPSSP}
	pulls          = []string{PullLazy, PullSoftBarrier}
	modes          = []string{ModeAuto, ModeApprove, ModeOff}
	stragglerKinds = []string{StragglerCompute, StragglerCPU, StragglerCPUSleep, StragglerBandwidth, StragglerPause, StragglerLink}
	actions        = []string{ActionAddServer, ActionRemoveServer, ActionAddWorker, ActionRemoveWorker,
		ActionRestart, ActionAdjustBatch, ActionReassign, ActionSetSync}
)

// WorkerName is the name of worker i.
func WorkerName(i int) string { return fmt.Sprintf("worker-%d", i) }

// ServerName is the name of server i.
func ServerName(i int) string { return fmt.Sprintf("server-%d", i) }

// WorkerIndex is the index in a worker's name (worker-3 -> 3).
func WorkerIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "worker-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || WorkerName(i) != name {
		return 0, false
	}
	return i, true
}

// WorkerNames returns the names of the workers the job starts with.
func (s *Spec) WorkerNames() []string {
	names := make([]string, s.Cluster.Workers)
	for i := range names {
		names[i] = WorkerName(i)
	}
	return names
}

// ServerNames returns the names of the servers the job starts with.
func (s *Spec) ServerNames() []string {
	names := make([]string, s.Cluster.Servers)
	for i := range names {
		names[i] = ServerName(i)
	}
	return names
}

// LocalBatch returns the starting local batch size of worker i: its entry in
// cluster.batch_sizes, or else its share of the global batch split evenly with
// the remainder going to the first workers. It is 0 for a worker the job does
// not start with.
func (s *Spec) LocalBatch(worker int) int {
	n := s.Cluster.Workers
	if worker < 0 || worker >= n {
		return 0
	}
	if s.Cluster.BatchSizes != nil {
		return s.Cluster.BatchSizes[WorkerName(worker)]
	}
	return evenShare(s.Train.GlobalBatch, n, worker)
}

// evenShare is part i of total split into n parts, larger parts first.
func evenShare(total, n, i int) int {
	b := total / n
	if i < total%n {
		b++
	}
	return b
}

// EvenSplit splits total into n parts that differ by at most one, larger
// parts first. It returns nil when n < 1.
func EvenSplit(total, n int) []int {
	if n < 1 {
		return nil
	}
	parts := make([]int, n)
	for i := range parts {
		parts[i] = evenShare(total, n, i)
	}
	return parts
}
