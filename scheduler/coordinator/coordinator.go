// Package coordinator is the job-coordination core of kelpie's scheduler:
// it admits the roles of a job as they register, hands every role the spec,
// its index and the versioned block table, starts the job once every role is
// ready, keeps the ledger of samples the workers trained (their live
// progress is the manager's), holds the block-table change under way, and
// decides when the job has finished or failed.
//
// It serves the Coordinator gRPC service of proto/coordinator.proto. Blocking
// calls (Ready, Done) return when their condition holds or the job fails,
// so a dead role never leaves the others hanging.
package coordinator

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/core/topology"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/clock"
	"github.com/kelpie/kelpie/scheduler/shard"
	"github.com/kelpie/kelpie/scheduler/textclean"
)

// NodeStats is what the coordinator knows of one node: its registration
// and its part in the job's start and end. A worker's live progress
// (iteration, batch size, loss, BPT) is the manager's; the coordinator
// keeps only the ledger of samples trained, for at-least-once accounting
// across restarts.
type NodeStats struct {
	Name      string
	Role      coordinatorpb.Role
	Pid       int32
	Addr      string
	Iteration int64 // iterations trained, as the worker said when it was done
	Samples   int64
	BatchSize int // local batch size when it registered
	Ready     bool
	Done      bool
	Left      bool // removed from the job (REMOVE_WORKER)
	Restarts  int
	// SamplesBase counts the samples of earlier runs of a restarted node.
	SamplesBase int64
	// CrossRegionBytes is what the worker said, when done, it had sent
	// across region boundaries.
	CrossRegionBytes int64
	// RegionBytes is what the worker's reports said it moved across
	// region boundaries, by region pair, over all its runs.
	RegionBytes map[RegionPair]int64
}

// RegionPair is an ordered pair of regions (topology.Region).
type RegionPair struct{ From, To string }

// TotalSamples counts every sample the node trained on, across restarts
// (a restarted worker's in-flight samples count twice: at-least-once).
func (n *NodeStats) TotalSamples() int64 { return n.SamplesBase + n.Samples }

// Job is one job's coordination state.
type Job struct {
	Spec *spec.Spec
	YAML []byte

	ready    chan struct{} // all nodes ready; the start time is set
	allDone  chan struct{} // every worker called Done
	finished chan struct{} // the evaluating worker sent the result
	failed   chan struct{}

	// Persist makes shard state changes durable; it is called (under the
	// job's lock) before a fetch or report is acknowledged.
	Persist func(changes []shard.Shard) error
	// PersistAddr makes a server's address durable; it is called (under
	// the job's lock) before the server's registration is acknowledged, so
	// that a restarted scheduler hands workers the address a restarted or
	// added server serves on, not the one it had before.
	PersistAddr func(node, addr string) error

	clk clock.Clock

	mu      sync.Mutex
	table   blocks.Table  // the block table in effect
	tableAt int64         // the iteration the table in effect took effect at (0: the job's first)
	plan    job.Plan      // the batch splits in effect
	changed chan struct{} // closed (and replaced) when a node registers
	next    *pendingTable // a table change under way
	servers []string      // server names by index; grows with ADD_SERVER
	workers []string      // worker names by index; grows with ADD_WORKER
	// memberIdx is members() as last made, nil when the membership has
	// changed since (staleMembers).
	memberIdx []int32
	queue     *shard.Queue
	nodes     map[string]*NodeStats
	addrs     []string
	start     time.Time
	err       error
	evalNode  string
	result    *coordinatorpb.ResultRequest
	diverged  *coordinatorpb.Divergence // set when the job failed by diverging
}

// Coordinator serves the Coordinator service for any number of jobs.
type Coordinator struct {
	coordinatorpb.UnimplementedCoordinatorServer

	clk  clock.Clock
	mu   sync.Mutex
	jobs map[string]*Job
}

// New makes an empty coordinator telling time by clk (nil: the wall
// clock).
func New(clk clock.Clock) *Coordinator {
	if clk == nil {
		clk = clock.Real()
	}
	return &Coordinator{jobs: map[string]*Job{}, clk: clk}
}

// AddJob admits a job; its nodes may register from now on.
func (c *Coordinator) AddJob(s *spec.Spec) (*Job, error) {
	t, err := job.Table(s)
	if err != nil {
		return nil, fmt.Errorf("job %s: %v", s.Name, err)
	}
	q, err := shard.New(ShardConfig(s))
	if err != nil {
		return nil, fmt.Errorf("job %s: shards: %v", s.Name, err)
	}
	j := &Job{
		queue: q, clk: c.clk, changed: make(chan struct{}),
		Spec: s, YAML: s.YAML(), table: t, plan: job.NewPlan(s, job.TrainSamples(s)),
		ready: make(chan struct{}), allDone: make(chan struct{}), finished: make(chan struct{}),
		failed: make(chan struct{}), nodes: map[string]*NodeStats{},
		addrs: make([]string, s.Cluster.Servers), servers: s.ServerNames(), workers: s.WorkerNames(),
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.jobs[s.Name]; ok && !old.over() {
		return nil, fmt.Errorf("job %s is already running", s.Name)
	}
	c.jobs[s.Name] = j
	return j, nil
}

// RestoreJob re-admits a job after a scheduler restart. A live job comes
// back started, with its nodes registered and ready as they were (servers
// with their addresses), so that its running roles can carry on; a finished
// one comes back failed with its cause, only to be shown.
func (c *Coordinator) RestoreJob(s *spec.Spec, start time.Time, nodes []NodeStats, ended error) (*Job, error) {
	j, err := c.AddJob(s)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	j.start = start
	for _, n := range nodes {
		n := n
		n.Ready = true
		j.nodes[n.Name] = &n
		if i, ok := spec.WorkerIndex(n.Name); ok && n.Role == coordinatorpb.Role_ROLE_WORKER {
			for len(j.workers) <= i {
				j.workers = append(j.workers, spec.WorkerName(len(j.workers)))
			}
		}
		if n.Role == coordinatorpb.Role_ROLE_SERVER {
			if idx, err := j.roleIndex(n.Name, n.Role); err == nil {
				j.addrs[idx] = n.Addr
			}
		}
	}
	close(j.ready)
	if ended != nil {
		j.err = ended
		close(j.failed)
	}
	j.mu.Unlock()
	return j, nil
}

// ShardConfig is the data-shard configuration of a job: K = ⌈N/(B·M)⌉
// shards per epoch.
func ShardConfig(s *spec.Spec) shard.Config {
	return shard.Config{Samples: int64(job.TrainSamples(s)), Epochs: s.Data.Epochs, GlobalBatch: s.Train.GlobalBatch,
		BatchesPerShard: s.Data.BatchesPerShard, Seed: s.Data.Seed}
}

// since is the time since the job started. The caller holds j.mu.
func (j *Job) since() time.Duration { return j.clk.Now().Sub(j.start) }

// Table is the block table in effect.
func (j *Job) Table() blocks.Table {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.table
}

// Plan is the job's batch splits in effect.
func (j *Job) Plan() job.Plan {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.plan
}

// Changed is closed when a node next registers (a new server's address
// is known): waiters re-read what they wait for, then wait on a fresh
// Changed.
func (j *Job) Changed() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.changed
}

// notifyLocked wakes the waiters on Changed. The caller holds j.mu.
func (j *Job) notifyLocked() {
	close(j.changed)
	j.changed = make(chan struct{})
}

// Queue runs f on the job's shard queue under the job's lock.
func (j *Job) Queue(f func(q *shard.Queue)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	f(j.queue)
}

// SetQueue replaces the job's shard queue (restored from the store).
func (j *Job) SetQueue(q *shard.Queue) {
	j.mu.Lock()
	j.queue = q
	j.mu.Unlock()
}

// ShardCounts is the queue's TODO, DOING and DONE counts and its total.
func (j *Job) ShardCounts() (todo, doing, done, total int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	todo, doing, done = j.queue.Counts()
	return todo, doing, done, j.queue.Total()
}

// persistLocked writes the queue's pending changes. When that fails (a
// full disk) the changes are undone, so that the call that made them fails
// whole and its caller's retry starts from what is durable.
func (j *Job) persistLocked() error {
	ch := j.queue.Pending()
	if len(ch) > 0 && j.Persist != nil {
		if err := j.Persist(ch); err != nil {
			j.queue.Rollback()
			return status.Errorf(codes.Unavailable, "job %s: persist shard state: %v", j.Spec.Name, err)
		}
	}
	j.queue.Commit()
	return nil
}

// persistAddrLocked writes a server's address (PersistAddr); a failure
// fails the registration Unavailable, and the server registers again.
func (j *Job) persistAddrLocked(node, addr string) error {
	if j.PersistAddr == nil {
		return nil
	}
	if err := j.PersistAddr(node, addr); err != nil {
		return status.Errorf(codes.Unavailable, "job %s: persist the address of %s: %v", j.Spec.Name, node, err)
	}
	return nil
}

// FetchShard hands a worker its next shard.
func (c *Coordinator) FetchShard(_ context.Context, r *coordinatorpb.FetchShardRequest) (*coordinatorpb.FetchShardResponse, error) {
	j, err := c.job(r.Job)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if n, ok := j.nodes[r.Node]; !ok || n.Role != coordinatorpb.Role_ROLE_WORKER {
		return nil, status.Errorf(codes.NotFound, "job %s has no registered worker %q", r.Job, r.Node)
	}
	resp := &coordinatorpb.FetchShardResponse{}
	if sh, ok := j.lostDelivery(r); ok {
		// The answer to an earlier fetch never reached the worker: the
		// same shard again, nothing changes in the queue.
		resp.Shard = j.shardInfo(sh)
	} else if sh, ok := j.queue.Fetch(r.Node, j.since()); ok {
		if err := j.persistLocked(); err != nil {
			return nil, err
		}
		resp.Shard = j.shardInfo(sh)
	}
	todo, doing, done := j.queue.Counts()
	resp.Todo, resp.Doing, resp.Done, resp.Total = int64(todo), int64(doing), int64(done), int64(j.queue.Total())
	return resp, nil
}

// lostDelivery is a shard the queue has DOING for the fetching worker and
// the worker does not list among those it holds (FetchShardRequest.held):
// its delivery was lost. The caller holds j.mu.
func (j *Job) lostDelivery(r *coordinatorpb.FetchShardRequest) (shard.Shard, bool) {
	if !r.HeldKnown {
		return shard.Shard{}, false
	}
	for _, sh := range j.queue.Held(r.Node) {
		if !slices.Contains(r.Held, int64(sh.ID)) {
			return sh, true
		}
	}
	return shard.Shard{}, false
}

func (j *Job) shardInfo(sh shard.Shard) *coordinatorpb.ShardInfo {
	return &coordinatorpb.ShardInfo{Id: int64(sh.ID), Epoch: int32(sh.Epoch), Offset: sh.Offset, Length: sh.Length,
		Order: j.queue.Order(sh)}
}

// ReportShard marks shards DONE.
func (c *Coordinator) ReportShard(_ context.Context, r *coordinatorpb.ReportShardRequest) (*coordinatorpb.ReportShardResponse, error) {
	j, err := c.job(r.Job)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	resp := &coordinatorpb.ReportShardResponse{}
	now := j.since()
	if r.Release && len(r.Ids) == 0 {
		j.queue.Release(r.Node, now)
	}
	for _, id := range r.Ids {
		var err error
		if r.Release {
			err = j.queue.Return(r.Node, shard.ID(id), now)
		} else {
			err = j.queue.Report(r.Node, shard.ID(id), now)
		}
		if err != nil {
			resp.Refused = append(resp.Refused, err.Error())
		}
	}
	if err := j.persistLocked(); err != nil {
		return nil, err
	}
	return resp, nil
}

// Job returns a job by name.
func (c *Coordinator) Job(name string) (*Job, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.jobs[name]
	return j, ok
}

func (c *Coordinator) job(name string) (*Job, error) {
	j, ok := c.Job(name)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "coordinator: no job %q", name)
	}
	return j, nil
}

func (j *Job) started() bool {
	select {
	case <-j.ready:
		return true
	default:
		return false
	}
}

func (j *Job) over() bool {
	select {
	case <-j.finished:
		return true
	case <-j.failed:
		return true
	default:
		return false
	}
}

// Fail ends the job with an error; blocked and later calls of its nodes are
// answered with it.
func (j *Job) Fail(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil || j.over() {
		return
	}
	j.err = err
	close(j.failed)
}

// Err is the job's failure, if any.
func (j *Job) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Started is closed once every node is ready.
func (j *Job) Started() <-chan struct{} { return j.ready }

// Finished is closed when the job has completed with a result.
func (j *Job) Finished() <-chan struct{} { return j.finished }

// Failed is closed when the job has failed.
func (j *Job) Failed() <-chan struct{} { return j.failed }

// Start is the job's time zero (zero until Ready).
func (j *Job) Start() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.start
}

// Result is the evaluating worker's report (nil until Finished).
func (j *Job) Result() *coordinatorpb.ResultRequest {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.result
}

// ServerAddrs lists the servers' addresses by index.
func (j *Job) ServerAddrs() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.addrs...)
}

// Nodes is a copy of every node's stats, sorted by name.
func (j *Job) Nodes() []NodeStats {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]NodeStats, 0, len(j.nodes))
	for _, n := range j.nodes {
		c := *n
		c.RegionBytes = maps.Clone(n.RegionBytes)
		out = append(out, c)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// WorkerSamples counts the samples every worker of the job has trained so
// far, across restarts (NodeStats.TotalSamples summed over the workers):
// the count the job's throughput is measured from.
func (j *Job) WorkerSamples() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	var s int64
	for _, n := range j.nodes {
		if n.Role == coordinatorpb.Role_ROLE_WORKER {
			s += n.TotalSamples()
		}
	}
	return s
}

// FinalIterations is the iteration count each worker that is done said it
// ended at (its last iteration, which its last periodic report may not
// have reached); nil when none is done.
func (j *Job) FinalIterations() map[string]int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out map[string]int64
	for _, n := range j.nodes {
		if n.Role == coordinatorpb.Role_ROLE_WORKER && n.Done {
			if out == nil {
				out = map[string]int64{}
			}
			out[n.Name] = n.Iteration
		}
	}
	return out
}

// roleIndex checks a node name against the spec and returns its role index.
// The caller holds j.mu.
func (j *Job) roleIndex(node string, role coordinatorpb.Role) (int, error) {
	names := j.workers
	if role == coordinatorpb.Role_ROLE_SERVER {
		names = j.servers
	}
	// Slot i is named ROLE-i (spec.WorkerName, spec.ServerName): looked
	// up by its number first, so that registering N nodes is not O(N²)
	// (0.6 s at 20,000 workers); the search below is for any other name.
	if _, num, ok := strings.Cut(node, "-"); ok {
		if i, err := strconv.Atoi(num); err == nil && i >= 0 && i < len(names) && names[i] == node {
			return i, nil
		}
	}
	for i, n := range names {
		if n == node {
			return i, nil
		}
	}
	return 0, status.Errorf(codes.InvalidArgument, "job %s has no %v node %q", j.Spec.Name, role, node)
}

// AddWorker names a new worker slot (ADD_WORKER): the worker may register
// while the job runs.
func (j *Job) AddWorker() (string, int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	idx := len(j.workers)
	name := spec.WorkerName(idx)
	j.workers = append(j.workers, name)
	j.staleMembers()
	return name, idx
}

// Workers lists the job's workers by index, removed ones included.
func (j *Job) Workers() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.workers)
}

// members is the indexes of the workers in the barrier: every worker not
// removed. It is kept until the membership changes (staleMembers): every
// registration sends it, and making it afresh for each made a job's
// registrations O(workers²) — 41% of a 5,000-agent scheduler's
// allocations. The slice is shared by the responses and never changed in
// place.
func (j *Job) members() []int32 {
	if j.memberIdx != nil {
		return j.memberIdx
	}
	out := make([]int32, 0, len(j.workers))
	for i, name := range j.workers {
		if n := j.nodes[name]; n == nil || !n.Left {
			out = append(out, int32(i))
		}
	}
	j.memberIdx = out
	return out
}

// barrierFor is the barrier a registration of role is told: a server's
// (it counts the workers it waits for), none for a worker, which has no
// barrier of its own (runtime/role reads it for servers only). Sending it
// to every worker made a job's registrations O(workers²) in bytes: at
// 20,000 workers a registration storm marshalled some 50 KB per worker, and
// clearing gRPC's buffers for them was 69% of the scheduler's CPU while the
// agents connected.
func (j *Job) barrierFor(role coordinatorpb.Role) []int32 {
	if role != coordinatorpb.Role_ROLE_SERVER {
		return nil
	}
	return j.members()
}

// staleMembers drops the kept members: a worker was added or removed.
func (j *Job) staleMembers() { j.memberIdx = nil }

// checkAllDoneLocked closes allDone once every worker still in the job
// has called Done. A shard still DOING then is one no worker will train (a
// worker that finished holds none): the job fails saying which, instead of
// completing with a shard neither trained nor back in the queue.
func (j *Job) checkAllDoneLocked() {
	for _, name := range j.workers {
		n := j.nodes[name]
		if n == nil || (!n.Done && !n.Left) {
			return
		}
	}
	select {
	case <-j.allDone:
		return
	default:
	}
	if err := j.strandedLocked(); err != nil && !j.over() {
		j.err = err
		close(j.failed)
		return
	}
	close(j.allDone)
}

// strandedLocked names the shards still DOING, and who holds them, when
// every worker has finished; nil when there is none.
func (j *Job) strandedLocked() error {
	_, doing, _ := j.queue.Counts()
	if doing == 0 {
		return nil
	}
	var held []string
	for _, name := range j.workers {
		for _, sh := range j.queue.Held(name) {
			held = append(held, fmt.Sprintf("shard %d (%s)", sh.ID, name))
		}
	}
	const shown = 8
	more := ""
	if len(held) > shown {
		more = fmt.Sprintf(" and %d more", len(held)-shown)
		held = held[:shown]
	}
	return fmt.Errorf("every worker finished with %d shards still DOING, which no worker will train: %s%s; "+
		"the job does not complete with data left out", doing, strings.Join(held, ", "), more)
}

// assignment is the wire form of the current table. It copies the
// addresses and names: the response is marshalled after j.mu is released.
func (j *Job) assignment() *coordinatorpb.Assignment {
	return job.Assignment(j.table, slices.Clone(j.addrs), slices.Clone(j.servers))
}

// Assignment is the wire form of the current block table.
func (j *Job) Assignment() *coordinatorpb.Assignment {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.assignment()
}

// AddServer makes room for one more server (scale-out) and returns its name
// and index; the server registers under that name.
func (j *Job) AddServer() (string, int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	idx := len(j.servers)
	name := spec.ServerName(idx)
	j.servers = append(j.servers, name)
	j.addrs = append(j.addrs, "")
	return name, idx
}

// ServerNames lists the servers by index (removed ones keep their slot).
func (j *Job) ServerNames() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.servers...)
}

// SharedServerNames is ServerNames without the copy, for the report path:
// the slice is shared and must not be changed. The job's list only grows
// by appends past its end, so the names a caller holds never change, and
// the slice has no spare capacity, so a caller's append copies.
func (j *Job) SharedServerNames() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.servers[:len(j.servers):len(j.servers)]
}

// pendingTable is a block-table change under way: workers follow the
// current table until iteration at, then t.
type pendingTable struct {
	t       blocks.Table
	removed []int
	at      int64
	action  string
}

// BeginTable announces a table change (from iteration at, by action):
// workers that (re)start meanwhile learn both tables.
func (j *Job) BeginTable(t blocks.Table, removed []int, at int64, action string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.next = &pendingTable{t: t, removed: removed, at: at, action: action}
}

// CommitTable makes the announced table the current one once every worker
// follows it; removed servers lose their address.
func (j *Job) CommitTable() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.next == nil {
		return
	}
	j.table, j.tableAt = j.next.t, j.next.at
	for _, r := range j.next.removed {
		if r >= 0 && r < len(j.addrs) {
			j.addrs[r] = ""
		}
	}
	j.next = nil
}

// TableAt is the iteration the block table in effect took effect at: every
// worker has reached it (0 for the job's first table).
func (j *Job) TableAt() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.tableAt
}

// PendingTable is the wire form of the table change under way if action
// made it, else nil. The pending change lives here only: workers that
// register meanwhile learn it (catchUp), and the manager sends and replays
// it to the workers' agents.
func (j *Job) PendingTable(action string) *coordinatorpb.Assignment {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.next == nil || j.next.action != action {
		return nil
	}
	return j.nextAssignment()
}

// nextAssignment is the wire form of the announced table.
func (j *Job) nextAssignment() *coordinatorpb.Assignment {
	addrs := append([]string(nil), j.addrs...)
	for _, r := range j.next.removed {
		if r >= 0 && r < len(addrs) {
			addrs[r] = ""
		}
	}
	return job.Assignment(j.next.t, addrs, slices.Clone(j.servers))
}

func (j *Job) wait(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-j.failed:
		return status.Errorf(codes.Aborted, "job %s failed: %v", j.Spec.Name, j.Err())
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// AddSplit records an ADJUST_BS that took effect, for workers that restart
// later.
func (j *Job) AddSplit(from int64, local []int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	p, err := j.plan.WithSplit(from, local)
	if err != nil {
		return err
	}
	j.plan = p
	return nil
}

func (j *Job) splits() []*coordinatorpb.BatchSplit {
	var out []*coordinatorpb.BatchSplit
	for _, c := range j.plan.Changes {
		s := &coordinatorpb.BatchSplit{From: c.From}
		for _, b := range c.Local {
			s.Local = append(s.Local, int32(b))
		}
		out = append(out, s)
	}
	return out
}

// Register admits a node and tells it its job.
func (c *Coordinator) Register(ctx context.Context, req *coordinatorpb.RegisterRequest) (*coordinatorpb.RegisterResponse, error) {
	j, err := c.job(req.Job)
	if err != nil {
		return nil, err
	}
	if req.Role == coordinatorpb.Role_ROLE_SERVER && req.Addr == "" {
		return nil, status.Errorf(codes.InvalidArgument, "server %s registered without an address", req.Node)
	}
	if err := checkAddr(req.Addr); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s registered an address %v", req.Node, err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	defer j.notifyLocked()
	idx, err := j.roleIndex(req.Node, req.Role)
	if err != nil {
		return nil, err
	}
	if j.over() {
		return nil, status.Errorf(codes.FailedPrecondition, "job %s is over", req.Job)
	}
	if old, ok := j.nodes[req.Node]; ok && j.started() {
		// A restarted role: workers resume from the servers' parameters.
		// A server's blocks live in its memory, so a restarted server
		// cannot rejoin until blocks can be restored (snapshots).
		if req.Role == coordinatorpb.Role_ROLE_SERVER {
			// A restarted server comes back from its snapshot at a new
			// address; workers find it when they re-register.
			if err := j.persistAddrLocked(req.Node, req.Addr); err != nil {
				return nil, err
			}
			j.addrs[idx] = req.Addr
			old.Addr, old.Pid = req.Addr, req.Pid
			old.Restarts++
			return &coordinatorpb.RegisterResponse{SpecYaml: string(j.YAML), Index: int32(idx), Assignment: j.assignment(),
				Workers: j.members()}, nil
		}
		if old.Left {
			return nil, status.Errorf(codes.FailedPrecondition, "worker %s was removed from job %s", req.Node, req.Job)
		}
		// Its DOING shards go back to the queue: only they are recomputed.
		j.queue.Release(req.Node, j.since())
		if err := j.persistLocked(); err != nil {
			return nil, err
		}
		// An allreduce worker's peers dial it at its new address.
		old.Addr, old.Pid = req.Addr, req.Pid
		old.Restarts++
		old.SamplesBase += old.Samples
		old.Samples = 0
		old.Done = false
		resp := &coordinatorpb.RegisterResponse{SpecYaml: string(j.YAML), Index: int32(idx), Assignment: j.assignment()}
		j.catchUp(resp)
		return resp, nil
	}
	added := req.Role == coordinatorpb.Role_ROLE_WORKER && idx >= j.Spec.Cluster.Workers
	if j.started() && req.Role != coordinatorpb.Role_ROLE_SERVER && !added {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s registered after job %s started", req.Node, req.Job)
	}
	n := &NodeStats{Name: req.Node, Role: req.Role, Pid: req.Pid, Addr: req.Addr}
	if req.Role == coordinatorpb.Role_ROLE_SERVER {
		if err := j.persistAddrLocked(req.Node, req.Addr); err != nil {
			return nil, err
		}
		j.addrs[idx] = req.Addr
	} else {
		n.BatchSize = j.plan.LocalOf(0, idx)
	}
	if old := j.nodes[req.Node]; old != nil && old.Left {
		j.staleMembers() // a removed worker's name registered again
	}
	j.nodes[req.Node] = n
	resp := &coordinatorpb.RegisterResponse{SpecYaml: string(j.YAML), Index: int32(idx), Assignment: j.assignment(),
		Workers: j.barrierFor(req.Role)}
	if added {
		// A worker added while the job runs (ADD_WORKER) follows the splits
		// and any table change under way, as a restarted one does.
		j.catchUp(resp)
	}
	return resp, nil
}

// catchUp tells a worker joining a running job (restarted or added) the
// batch splits so far and any table change under way. The caller holds
// j.mu.
func (j *Job) catchUp(resp *coordinatorpb.RegisterResponse) {
	resp.Splits = j.splits()
	if j.next != nil {
		resp.NextAssignment, resp.NextAt, resp.NextAction = j.nextAssignment(), j.next.at, j.next.action
	}
}

// Ready marks a node ready and blocks until every node of the job is.
func (c *Coordinator) Ready(ctx context.Context, req *coordinatorpb.ReadyRequest) (*coordinatorpb.ReadyResponse, error) {
	j, err := c.job(req.Job)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	n, ok := j.nodes[req.Node]
	if !ok {
		j.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "node %s is ready before it registered with job %s", req.Node, req.Job)
	}
	if j.started() {
		defer j.mu.Unlock()
		return j.readyResponse(), nil
	}
	n.Ready = true
	ready := 0
	for _, m := range j.nodes {
		if m.Ready {
			ready++
		}
	}
	if ready == j.Spec.Cluster.Servers+j.Spec.Cluster.Workers {
		select {
		case <-j.ready:
		default:
			j.start = j.clk.Now()
			close(j.ready)
		}
	}
	j.mu.Unlock()
	if err := j.wait(ctx, j.ready); err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.readyResponse(), nil
}

// readyResponse is what a ready node learns: the block table and the
// job's start, and for an allreduce job the workers' peer addresses. The
// caller holds j.mu.
func (j *Job) readyResponse() *coordinatorpb.ReadyResponse {
	r := &coordinatorpb.ReadyResponse{Assignment: j.assignment(), StartUnixNano: j.start.UnixNano()}
	if j.Spec.Cluster.Servers == 0 {
		r.Peers = make([]string, len(j.workers))
		for i, name := range j.workers {
			if n := j.nodes[name]; n != nil {
				r.Peers[i] = n.Addr
			}
		}
	}
	return r
}

// Progress is retired: a worker's reports come on its agent's stream
// only (the manager's Agent service), where they reach the samples ledger
// and the Monitor alike. The call stays in the service so that an old
// worker binary gets this answer rather than an unknown method.
func (c *Coordinator) Progress(context.Context, *coordinatorpb.ProgressReport) (*coordinatorpb.ProgressAck, error) {
	return nil, status.Error(codes.Unimplemented, "Coordinator.Progress is retired: a worker reports through its node's agent (kelpie agent --role worker), on the agent's stream")
}

// Observe records in the samples ledger how many samples a worker's
// report says it has trained (since its last restart).
func (j *Job) Observe(r *coordinatorpb.ProgressReport) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	n, ok := j.nodes[r.Node]
	if !ok {
		return status.Errorf(codes.NotFound, "job %s has no registered node %q", j.Spec.Name, r.Node)
	}
	if err := j.addRegionBytesLocked(n, r.RegionBytes); err != nil {
		return err
	}
	n.Samples = r.Samples
	return nil
}

// addRegionBytesLocked adds a worker's bytes by region pair, after
// checking every pair names two different regions of the job's topology
// and a count that is not negative (nothing is added otherwise). The
// caller holds j.mu.
func (j *Job) addRegionBytesLocked(n *NodeStats, rb []*coordinatorpb.RegionBytes) error {
	if len(rb) == 0 {
		return nil
	}
	regions := map[string]bool{topology.Region(topology.Place{}): true}
	for _, l := range j.Spec.Cluster.Topology {
		regions[topology.Region(topology.Place{Rack: l.Rack, Pod: l.Pod})] = true
	}
	for _, b := range rb {
		switch {
		case !regions[b.FromRegion] || !regions[b.ToRegion]:
			return status.Errorf(codes.InvalidArgument, "%s: region pair %.64q → %.64q: not regions of job %s's topology", n.Name, b.FromRegion, b.ToRegion, j.Spec.Name)
		case b.FromRegion == b.ToRegion:
			return status.Errorf(codes.InvalidArgument, "%s: region pair %q → %q does not cross regions", n.Name, b.FromRegion, b.ToRegion)
		case b.Bytes < 0:
			return status.Errorf(codes.InvalidArgument, "%s: %d bytes from %q to %q", n.Name, b.Bytes, b.FromRegion, b.ToRegion)
		}
	}
	if n.RegionBytes == nil {
		n.RegionBytes = map[RegionPair]int64{}
	}
	for _, b := range rb {
		n.RegionBytes[RegionPair{b.FromRegion, b.ToRegion}] += b.Bytes
	}
	return nil
}

// RegionBytes sums the workers' bytes by region pair, ordered by pair.
func (j *Job) RegionBytes() []*coordinatorpb.RegionBytes {
	j.mu.Lock()
	sum := map[RegionPair]int64{}
	for _, n := range j.nodes {
		for p, b := range n.RegionBytes {
			sum[p] += b
		}
	}
	j.mu.Unlock()
	out := make([]*coordinatorpb.RegionBytes, 0, len(sum))
	for p, b := range sum {
		out = append(out, &coordinatorpb.RegionBytes{FromRegion: p.From, ToRegion: p.To, Bytes: b})
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].FromRegion != out[b].FromRegion {
			return out[a].FromRegion < out[b].FromRegion
		}
		return out[a].ToRegion < out[b].ToRegion
	})
	return out
}

// Done records that a worker finished and blocks until all have; one worker
// is told to evaluate the final model.
func (c *Coordinator) Done(ctx context.Context, r *coordinatorpb.DoneRequest) (*coordinatorpb.DoneResponse, error) {
	j, err := c.job(r.Job)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	n, ok := j.nodes[r.Node]
	if !ok || n.Role != coordinatorpb.Role_ROLE_WORKER {
		j.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "job %s has no registered worker %q", r.Job, r.Node)
	}
	if !n.Done { // a Done sent again (its answer was lost) adds nothing
		if err := j.addRegionBytesLocked(n, r.RegionBytes); err != nil {
			j.mu.Unlock()
			return nil, err
		}
	}
	n.Done, n.Iteration, n.Samples = true, r.Iterations, r.Samples
	n.CrossRegionBytes = r.CrossRegionBytes
	if r.Left {
		// A removed worker is out of the job: it neither waits for the
		// others nor evaluates, and they no longer wait for it.
		n.Left = true
		j.staleMembers()
		j.checkAllDoneLocked()
		j.mu.Unlock()
		return &coordinatorpb.DoneResponse{}, nil
	}
	if j.evalNode == "" {
		j.evalNode = r.Node
	}
	j.checkAllDoneLocked()
	eval := j.evalNode == r.Node
	j.mu.Unlock()
	if err := j.wait(ctx, j.allDone); err != nil {
		return nil, err
	}
	return &coordinatorpb.DoneResponse{Evaluate: eval}, nil
}

// Result records the final evaluation and completes the job.
func (c *Coordinator) Result(_ context.Context, r *coordinatorpb.ResultRequest) (*coordinatorpb.ResultResponse, error) {
	j, err := c.job(r.Job)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if r.Node != j.evalNode {
		return nil, status.Errorf(codes.PermissionDenied, "node %s was not asked to evaluate job %s", r.Node, r.Job)
	}
	if j.over() {
		return nil, status.Errorf(codes.FailedPrecondition, "job %s is already over", r.Job)
	}
	j.result = r
	close(j.finished)
	return &coordinatorpb.ResultResponse{}, nil
}

// DropWorker takes a worker slot out of the job (an added worker that never
// came up, or one removed for good): the others no longer wait for it. The
// error is the store's, when the shards it held could not be written back
// to the queue (they stay DOING: the job then fails rather than completes).
func (j *Job) DropWorker(name string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := j.nodes[name]
	if n == nil {
		n = &NodeStats{Name: name, Role: coordinatorpb.Role_ROLE_WORKER}
		j.nodes[name] = n
	}
	n.Left = true
	// The shards it took (it may have registered and fetched before it
	// was given up on) go back to the queue for the others.
	j.queue.Release(name, j.since())
	err := j.persistLocked()
	j.staleMembers()
	j.checkAllDoneLocked()
	return err
}

// SetSpecYAML replaces the spec that registering nodes receive (a live
// change of the job's settings, such as its synchronisation model, that a
// node joining later must follow).
func (j *Job) SetSpecYAML(b []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.YAML = b
}

// maxAddrBytes bounds a registered address: the longest host:port a DNS
// name (253 bytes) or an IPv6 literal with a zone can make.
const maxAddrBytes = 300

// checkAddr refuses a registered address that is not a plain host:port
// (empty is allowed: a worker without a peer listener). Peers dial it and
// the console shows it, so it is stored only when it is one: bounded,
// printable, host and port.
func checkAddr(addr string) error {
	if addr == "" {
		return nil
	}
	if len(addr) > maxAddrBytes {
		return fmt.Errorf("of %d bytes (at most %d)", len(addr), maxAddrBytes)
	}
	if textclean.Clean(addr, 0) != addr || strings.ContainsAny(addr, " /") {
		return fmt.Errorf("%q with characters no host:port has", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("%q that is not host:port", addr)
	}
	return nil
}
