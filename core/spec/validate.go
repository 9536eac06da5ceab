package spec

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// checker validates a defaulted Spec, reporting each problem at the line of
// the key it concerns.
type checker struct {
	d   *decoder
	s   *Spec
	lim Limits
}

// errorf reports a problem with the value at path, unless decoding already
// reported one there (a value of the wrong type is left zero, and saying it
// is also out of range would be noise).
func (c *checker) errorf(path, format string, args ...any) {
	if c.d.bad[path] {
		return
	}
	c.d.errorf(c.d.lineOf(path), path, format, args...)
}

func (c *checker) oneOf(path, got string, allowed []string) {
	if contains(allowed, got) {
		return
	}
	if got == "" && !c.d.given(path) {
		c.errorf(path, "required (one of %s)", strings.Join(allowed, ", "))
		return
	}
	msg := fmt.Sprintf("must be one of %s (got %q", strings.Join(allowed, ", "), got)
	if s := suggest(got, allowed); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	c.errorf(path, "%s)", msg)
}

func (c *checker) atLeast(path string, got, min int64) bool {
	if got < min {
		c.errorf(path, "must be at least %d (got %d)", min, got)
		return false
	}
	return true
}

func (c *checker) between(path string, got, lo, hi float64) {
	if got < lo || got > hi {
		c.errorf(path, "must be between %s and %s (got %s)", fmtFloat(lo), fmtFloat(hi), fmtFloat(got))
	}
}

func (c *checker) positive(path string, got float64) {
	if got <= 0 {
		c.errorf(path, "must be positive (got %s)", fmtFloat(got))
	}
}

func (c *checker) nonNegative(path string, got time.Duration) bool {
	if got < 0 {
		c.errorf(path, "must not be negative (got %s)", got)
		return false
	}
	return true
}

func (c *checker) positiveDuration(path string, got time.Duration) {
	if got <= 0 {
		c.errorf(path, "must be positive (got %s)", got)
	}
}

// onlyFor reports keys under parent that were given but are not used in
// this case (described by what, e.g. "kind cpu").
func (c *checker) onlyFor(parent string, keys, used []string, what string) {
	for _, k := range keys {
		if !contains(used, k) && c.d.given(joinPath(parent, k)) {
			c.errorf(joinPath(parent, k), "not used by %s", what)
		}
	}
}

var (
	nameRE  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	labelRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	// quantityRE is a Kubernetes resource quantity: a decimal number with
	// an optional SI or binary suffix (no exponents).
	quantityRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$`)
)

const maxNameLen = 63 // a DNS label, so the name can name pods

func (c *checker) validate() {
	s := c.s
	switch {
	case s.Name == "":
		if c.d.given("name") {
			c.errorf("name", "must not be empty")
		} else {
			c.errorf("name", "required")
		}
	case len(s.Name) > maxNameLen:
		c.errorf("name", "must be at most %d characters (got %d)", maxNameLen, len(s.Name))
	case !nameRE.MatchString(s.Name):
		c.errorf("name", "must be lowercase letters, digits and '-', starting and ending with a letter or digit (got %q)", s.Name)
	}

	c.validateModelData()
	c.validateTrain()
	c.validateCluster()
	c.validateSync("sync", &s.Sync, s.Cluster.Workers)
	c.validatePolicies()
	c.validateStragglers()
	c.validateNetwork()
	c.validateScript()
	c.validateLimits()
}

func (c *checker) validateModelData() {
	s := c.s
	c.oneOf("model.kind", s.Model.Kind, modelKinds)
	c.oneOf("data.kind", s.Data.Kind, dataKinds)
	if contains(modelKinds, s.Model.Kind) && contains(dataKinds, s.Data.Kind) {
		want := DataMNIST
		switch s.Model.Kind {
		case ModelSparseLR:
			want = DataSyntheticCTR
		case ModelTorch:
			want = DataTorch
		}
		if s.Data.Kind != want {
			path := "model.kind"
			if !c.d.given(path) {
				path = "data.kind"
			}
			c.errorf(path, "model %s trains on %s data, not %s", s.Model.Kind, want, s.Data.Kind)
		}
	}
	if s.Model.Kind == ModelMLP {
		if len(s.Model.Hidden) == 0 {
			c.errorf("model.hidden", "must list at least one layer width")
		}
		for i, h := range s.Model.Hidden {
			c.atLeast(indexPath("model.hidden", i), int64(h), 1)
		}
	} else if c.d.given("model.hidden") && contains(modelKinds, s.Model.Kind) {
		c.errorf("model.hidden", "only used by kind mlp (kind is %s)", s.Model.Kind)
	}

	c.validateTorch()
	c.atLeast("data.epochs", int64(s.Data.Epochs), 1)
	c.atLeast("data.batches_per_shard", int64(s.Data.BatchesPerShard), 1)
	if s.Data.Kind == DataSyntheticCTR {
		c.atLeast("data.samples", int64(s.Data.Samples), 1)
		c.atLeast("data.test_samples", int64(s.Data.TestSamples), 1)
		if s.Data.Features < 1 {
			c.errorf("data.features", "must be at least 1 (got %d)", s.Data.Features)
		}
		if c.atLeast("data.fields", int64(s.Data.Fields), 1) && s.Data.Features >= 1 && uint64(s.Data.Fields) > s.Data.Features {
			c.errorf("data.fields", "must be at most features (%d) (got %d)", s.Data.Features, s.Data.Fields)
		}
	}
}

// validateTorch checks the keys of a torch model: its script, threads and
// (when computed) tensors; other models must not use them.
func (c *checker) validateTorch() {
	s := c.s
	if s.Model.Kind != ModelTorch {
		if contains(modelKinds, s.Model.Kind) {
			for _, k := range []string{"model.script", "model.threads", "model.tensors"} {
				if c.d.given(k) {
					c.errorf(k, "only used by kind torch (kind is %s)", s.Model.Kind)
				}
			}
		}
		return
	}
	if s.Model.Script == "" {
		c.errorf("model.script", "required for kind torch: the path of the PyTorch script, relative to the spec")
	}
	c.atLeast("model.threads", int64(s.Model.Threads), 1)
	seen := map[string]bool{}
	sparse := 0
	for i, t := range s.Model.Tensors {
		path := indexPath("model.tensors", i)
		if t.Name == "" {
			c.errorf(path+".name", "required")
		} else if seen[t.Name] {
			c.errorf(path+".name", "tensor %q is listed twice", t.Name)
		}
		seen[t.Name] = true
		c.atLeast(path+".rows", int64(t.Rows), 1)
		c.atLeast(path+".cols", int64(t.Cols), 1)
		if t.Sparse {
			if sparse++; sparse > 1 {
				c.errorf(path+".sparse", "a model has at most one sparse tensor")
			}
		}
	}
	if s.Data.Samples < 0 {
		c.atLeast("data.samples", int64(s.Data.Samples), 1)
	}
	if ex := s.Cluster.Exchange; ex == ExchangeRing || ex == ExchangeRAT {
		c.errorf("cluster.exchange", "model torch trains against parameter servers: use exchange ps (got %s)", ex)
	}
}

func (c *checker) validateTrain() {
	t := c.s.Train
	c.atLeast("train.global_batch", int64(t.GlobalBatch), 1)
	c.positive("train.lr", t.LR)
	c.oneOf("train.optimizer", t.Optimizer, optimizers)
	if t.Optimizer == OptimizerMomentum {
		if t.Momentum < 0 || t.Momentum >= 1 {
			c.errorf("train.momentum", "must be at least 0 and less than 1 (got %s)", fmtFloat(t.Momentum))
		}
	} else if c.d.given("train.momentum") && contains(optimizers, t.Optimizer) {
		c.errorf("train.momentum", "only used by optimizer momentum (optimizer is %s)", t.Optimizer)
	}
	c.oneOf("train.lr_decay", t.LRDecay, lrDecays)
	c.nonNegative("train.hang_min", t.HangMin)
	if t.HangFactor < 0 || math.IsNaN(t.HangFactor) || math.IsInf(t.HangFactor, 0) {
		c.errorf("train.hang_factor", "must be a finite number >= 0 (got %s)", fmtFloat(t.HangFactor))
	}
	if t.LRFinal < 0 || t.LRFinal > 1 {
		c.errorf("train.lr_final", "must be in [0, 1] (got %s)", fmtFloat(t.LRFinal))
	} else if c.d.given("train.lr_final") && t.LRDecay == LRDecayNone {
		c.errorf("train.lr_final", "only used with lr_decay cosine or linear")
	}
}

func (c *checker) validateCluster() {
	s := c.s
	cl := s.Cluster
	allreduce := cl.Exchange == ExchangeRing || cl.Exchange == ExchangeRAT
	if allreduce {
		if cl.Servers != 0 {
			c.errorf("cluster.servers", "must be 0 for exchange %s: allreduce sums gradients among the workers (got %d)", cl.Exchange, cl.Servers)
		}
		if s.Model.Kind == ModelSparseLR {
			c.errorf("cluster.exchange", "%s sums dense gradients: model sparse-lr needs exchange ps", cl.Exchange)
		}
	} else {
		c.atLeast("cluster.servers", int64(cl.Servers), 1)
	}
	workersOK := c.atLeast("cluster.workers", int64(cl.Workers), 1)
	c.atLeast("cluster.block_bytes", cl.BlockBytes, 1)
	c.oneOf("cluster.assignment", cl.Assignment, assignments)
	c.oneOf("cluster.exchange", cl.Exchange, exchanges)
	c.oneOf("cluster.transport", cl.Transport, transports)
	c.oneOf("cluster.data_plane_encryption", cl.DataPlaneEncryption, encryptions)
	c.oneOf("cluster.elasticity", cl.Elasticity, elasticities)
	c.nonNegative("cluster.snapshot_interval", cl.SnapshotInterval)
	if workersOK && s.Train.GlobalBatch >= 1 && s.Train.GlobalBatch < cl.Workers {
		if c.d.given("train.global_batch") {
			c.errorf("train.global_batch", "must be at least cluster.workers (%d) (got %d)", cl.Workers, s.Train.GlobalBatch)
		} else {
			c.errorf("cluster.workers", "must be at most train.global_batch (%d) (got %d)", s.Train.GlobalBatch, cl.Workers)
		}
	}

	for _, node := range sortedNodeNames(cl.Topology) {
		path := "cluster.topology." + node
		c.node(path, node, "", true)
		l := cl.Topology[node]
		if l.Rack == "" && l.Pod == "" && l.Host == "" {
			c.errorf(path, "give a rack, a pod, a host or several")
		}
		for _, f := range []struct{ key, v string }{{"rack", l.Rack}, {"pod", l.Pod}, {"host", l.Host}} {
			if f.v != "" && (len(f.v) > 63 || !labelRE.MatchString(f.v)) {
				c.errorf(path+"."+f.key, "must be letters, digits, '.', '_' or '-', at most 63, starting and ending with a letter or digit (got %q)", f.v)
			}
		}
	}

	serversOK := cl.Servers >= 1
	if allreduce {
		for _, k := range []struct {
			path string
			v    int
		}{{"cluster.min_servers", cl.MinServers}, {"cluster.max_servers", cl.MaxServers}} {
			if k.v != 0 {
				c.errorf(k.path, "must be 0 for exchange %s: it has no parameter servers (got %d)", cl.Exchange, k.v)
			}
		}
	}
	for _, r := range []struct {
		role         string
		n, lo, hi    int
		ok           bool
		loKey, hiKey string
	}{
		{roleWorker, cl.Workers, cl.MinWorkers, cl.MaxWorkers, workersOK, "cluster.min_workers", "cluster.max_workers"},
		{roleServer, cl.Servers, cl.MinServers, cl.MaxServers, serversOK, "cluster.min_servers", "cluster.max_servers"},
	} {
		if r.role == roleServer && allreduce {
			continue
		}
		if c.atLeast(r.loKey, int64(r.lo), 1) && r.ok && r.lo > r.n {
			c.errorf(r.loKey, "must be at most cluster.%ss (%d) (got %d)", r.role, r.n, r.lo)
		}
		switch {
		case r.hi != 0 && r.ok && r.hi < r.n:
			c.errorf(r.hiKey, "must be 0 (no limit) or at least cluster.%ss (%d) (got %d)", r.role, r.n, r.hi)
		case r.role == roleWorker && s.Train.GlobalBatch >= 1 && r.hi > s.Train.GlobalBatch:
			c.errorf(r.hiKey, "must be at most train.global_batch (%d) (got %d)", s.Train.GlobalBatch, r.hi)
		}
	}

	if cl.BatchSizes != nil && workersOK {
		c.batchSizes("cluster.batch_sizes", cl.BatchSizes, &roleState{next: cl.Workers})
	}

	for _, r := range []struct {
		role string
		res  RoleResources
	}{{roleServer, cl.Resources.Server}, {roleWorker, cl.Resources.Worker}} {
		for _, q := range []struct{ key, v string }{{"cpu", r.res.CPU}, {"memory", r.res.Memory}} {
			path := "cluster.resources." + r.role + "." + q.key
			if q.v != "" && (len(q.v) > 32 || !quantityRE.MatchString(q.v)) {
				c.errorf(path, "must be a Kubernetes quantity such as 500m, 2, 512Mi or 4Gi (got %q)", q.v)
			}
		}
	}
}

// batchSizes checks that sizes gives every live worker a local batch of at
// least 1 and that they sum to the global batch.
func (c *checker) batchSizes(path string, sizes map[string]int, workers *roleState) {
	sum, valid := 0, 0
	for _, name := range sortedNodeNames(sizes) {
		p := path + "." + name
		role, i, ok := parseNode(name)
		if !ok || role != roleWorker || !workers.live(i) {
			c.errorf(p, "%q is not a live worker", name)
			continue
		}
		valid++
		if c.atLeast(p, int64(sizes[name]), 1) {
			sum += sizes[name]
		}
	}
	if valid < workers.count() {
		// At most len(sizes) live workers have sizes, so this finds the
		// first few missing ones without walking a huge cluster.
		var missing []string
		for i := 0; i < workers.next && len(missing) < min(4, workers.count()-valid); i++ {
			if _, ok := sizes[WorkerName(i)]; !ok && workers.live(i) {
				missing = append(missing, WorkerName(i))
			}
		}
		if n := workers.count() - valid; n > 3 {
			missing = append(missing[:3], fmt.Sprintf("and %d more", n-3))
		}
		c.errorf(path, "must give every worker a batch size; missing %s", strings.Join(missing, ", "))
		return
	}
	if sum != c.s.Train.GlobalBatch {
		c.errorf(path, "must sum to train.global_batch (%d) (got %d)", c.s.Train.GlobalBatch, sum)
	}
}

func (c *checker) validateSync(prefix string, sy *Sync, workers int) {
	c.oneOf(prefix+".model", sy.Model, syncModels)
	if ex := c.s.Cluster.Exchange; ex != ExchangePS && contains(exchanges, ex) && sy.Model != SyncBSP && contains(syncModels, sy.Model) {
		c.errorf(prefix+".model", "exchange %s is synchronous allreduce: only bsp (got %s)", ex, sy.Model)
	}
	c.atLeast(prefix+".staleness", int64(sy.Staleness), 0)
	c.oneOf(prefix+".pull", sy.Pull, pulls)
	c.between(prefix+".pssp.c", sy.PSSP.C, 0, 1)
	if sy.PSSP.Alpha <= 0 || sy.PSSP.Alpha > 1 {
		c.errorf(prefix+".pssp.alpha", "must be more than 0 and at most 1 (got %s)", fmtFloat(sy.PSSP.Alpha))
	}
	if c.atLeast(prefix+".drop.wait_for", int64(sy.Drop.WaitFor), 1) && workers >= 1 && sy.Drop.WaitFor > workers {
		c.errorf(prefix+".drop.wait_for", "must be at most the number of workers (%d) (got %d)", workers, sy.Drop.WaitFor)
	}
}

// stragglerKeysByKind are the keys each straggler kind uses beyond node,
// kind, start, end, period, on, follows_restart and cured_by_restart.
var stragglerKeysByKind = map[string][]string{
	StragglerCompute:   {"sleep", "intensity", "probability"},
	StragglerCPU:       {"intensity", "probability"},
	StragglerCPUSleep:  {"intensity", "probability"},
	StragglerBandwidth: {"rate"},
	StragglerPause:     {},
	StragglerLink:      {"rate", "region"},
}

func (c *checker) validateStragglers() {
	common := []string{"node", "kind", "start", "end", "period", "on", "follows_restart", "cured_by_restart"}
	for i, st := range c.s.Stragglers {
		path := indexPath("stragglers", i)
		key := func(k string) string { return path + "." + k }
		if st.Kind == StragglerLink {
			c.validateLink(path, st)
		} else if st.Node == "" {
			c.errorf(key("node"), "required")
		} else {
			c.node(key("node"), st.Node, "", true)
		}
		c.oneOf(key("kind"), st.Kind, stragglerKinds)
		if st.CuredByRestart && st.FollowsRestart {
			c.errorf(key("cured_by_restart"), "a process's own slowness does not follow it to a new host: not with follows_restart")
		} else if st.CuredByRestart && st.Kind == StragglerLink {
			c.errorf(key("cured_by_restart"), "a link's slowness is its host's, not a process's")
		}
		if used, ok := stragglerKeysByKind[st.Kind]; ok {
			c.onlyFor(path, stragglerKeys, append(slices.Clip(common), used...), "kind "+st.Kind)
		}
		switch st.Kind {
		case StragglerCompute:
			if !c.d.given(key("sleep")) {
				c.errorf(key("sleep"), "required for kind compute")
			} else {
				c.positiveDuration(key("sleep"), st.Sleep)
			}
			c.between(key("intensity"), st.Intensity, 0, 1)
			c.between(key("probability"), st.Probability, 0, 1)
		case StragglerCPU, StragglerCPUSleep:
			if !c.d.given(key("intensity")) {
				c.errorf(key("intensity"), "required for kind %s", st.Kind)
			} else if st.Intensity < 0 || st.Intensity >= 1 {
				c.errorf(key("intensity"), "must be at least 0 and less than 1 for kind %s (got %s)", st.Kind, fmtFloat(st.Intensity))
			}
			c.between(key("probability"), st.Probability, 0, 1)
			if st.Kind == StragglerCPU && st.Probability != 1 {
				// A competitor process contends all the time it is active;
				// a chance per iteration is the sleep model's.
				c.errorf(key("probability"), "must be 1 for kind cpu, a competitor that contends while active (a chance per iteration is kind cpu-sleep's; got %s)", fmtFloat(st.Probability))
			}
		case StragglerBandwidth:
			if !c.d.given(key("rate")) {
				c.errorf(key("rate"), "required for kind bandwidth")
			} else {
				c.positive(key("rate"), st.Rate)
			}
		}
		c.nonNegative(key("start"), st.Start)
		if c.d.given(key("end")) && st.End <= st.Start {
			c.errorf(key("end"), "must be after start (%s) (got %s)", st.Start, st.End)
		}
		givenPeriod, givenOn := c.d.given(key("period")), c.d.given(key("on"))
		switch {
		case givenPeriod && !givenOn:
			c.errorf(key("period"), "needs on: how long the straggler is active in each period")
		case givenOn && !givenPeriod:
			c.errorf(key("on"), "needs period")
		case givenPeriod:
			c.positiveDuration(key("period"), st.Period)
			if st.On <= 0 || st.On > st.Period {
				c.errorf(key("on"), "must be positive and at most period (%s) (got %s)", st.Period, st.On)
			}
		}
	}
}

// scriptKeysByAction are the keys each action uses beyond at and action.
var scriptKeysByAction = map[string][]string{
	ActionAddServer:    {"node"},
	ActionAddWorker:    {"node"},
	ActionRemoveServer: {"node"},
	ActionRemoveWorker: {"node"},
	ActionRestart:      {"node"},
	ActionAdjustBatch:  {"sizes"},
	ActionReassign:     {"assignment"},
	ActionSetSync:      syncKeys,
}

const (
	roleServer = "server"
	roleWorker = "worker"
)

// roleState tracks the live nodes of one role while the script runs: every
// index below next was created, and removed ones are gone.
type roleState struct {
	next    int
	removed map[int]bool
}

func (r *roleState) live(i int) bool { return i >= 0 && i < r.next && !r.removed[i] }
func (r *roleState) count() int      { return r.next - len(r.removed) }
func (r *roleState) remove(i int) {
	if r.removed == nil {
		r.removed = map[int]bool{}
	}
	r.removed[i] = true
}

func (c *checker) validateScript() {
	s := c.s
	servers := &roleState{next: max(s.Cluster.Servers, 0)}
	workers := &roleState{next: max(s.Cluster.Workers, 0)}
	created := createdNodes(s)
	for _, i := range scriptOrder(s) {
		st := s.Script[i]
		path := indexPath("script", i)
		key := func(k string) string { return path + "." + k }
		if !c.d.given(key("at")) {
			c.errorf(key("at"), "required")
		} else {
			c.nonNegative(key("at"), st.At)
		}
		c.oneOf(key("action"), st.Action, actions)
		used, ok := scriptKeysByAction[st.Action]
		if !ok {
			continue
		}
		c.onlyFor(path, scriptKeys, append([]string{"at", "action"}, used...), "action "+st.Action)
		needPS := func() {
			if ex := s.Cluster.Exchange; ex != ExchangePS && contains(exchanges, ex) {
				c.errorf(key("action"), "%s needs exchange ps (exchange is %s)", st.Action, ex)
			}
		}
		switch st.Action {
		case ActionAddServer, ActionAddWorker:
			if st.Node != created[i] {
				c.errorf(key("node"), "this step creates %s (got %q)", created[i], st.Node)
			}
			if st.Action == ActionAddServer {
				needPS()
				servers.next++
			} else {
				workers.next++
				if s.Train.GlobalBatch >= 1 && workers.count() > s.Train.GlobalBatch {
					c.errorf(key("action"), "would leave more workers (%d) than train.global_batch (%d)", workers.count(), s.Train.GlobalBatch)
				}
			}
		case ActionRemoveServer, ActionRemoveWorker, ActionRestart:
			if st.Node == "" {
				c.errorf(key("node"), "required for action %s", st.Action)
				continue
			}
			role := ""
			switch st.Action {
			case ActionRemoveServer:
				role = roleServer
				needPS()
			case ActionRemoveWorker:
				role = roleWorker
			}
			if !c.node(key("node"), st.Node, role, true) {
				continue
			}
			_, idx, _ := parseNode(st.Node)
			live := servers
			if strings.HasPrefix(st.Node, roleWorker) {
				live = workers
			}
			if !live.live(idx) {
				c.errorf(key("node"), "%s is not running at %s", st.Node, st.At)
				continue
			}
			if st.Action == ActionRestart {
				continue
			}
			if live.count() == 1 {
				c.errorf(key("node"), "cannot remove the last %s", role)
				continue
			}
			live.remove(idx)
		case ActionAdjustBatch:
			if st.Sizes == nil {
				c.errorf(key("sizes"), "required for action adjust-batch")
				continue
			}
			c.batchSizes(key("sizes"), st.Sizes, workers)
		case ActionReassign:
			needPS()
			if st.Assignment != "" || c.d.given(key("assignment")) {
				c.oneOf(key("assignment"), st.Assignment, assignments)
			}
		case ActionSetSync:
			c.validateSync(path, st.Sync, workers.count())
		}
	}
}

// parseNode splits a canonical node name such as worker-3 into its role and
// index.
func parseNode(name string) (role string, index int, ok bool) {
	role, num, found := strings.Cut(name, "-")
	if !found || (role != roleServer && role != roleWorker) {
		return "", 0, false
	}
	i, err := strconv.Atoi(num)
	if err != nil || i < 0 || strconv.Itoa(i) != num {
		return "", 0, false
	}
	return role, i, true
}

// node checks that name is a node of role (any role when empty) that the
// job starts with or, when scripted is true, that a scripted add creates.
func (c *checker) node(path, name, role string, scripted bool) bool {
	r, i, ok := parseNode(name)
	if !ok || (role != "" && r != role) {
		want := "a node name such as worker-0 or server-1"
		if role != "" {
			want = "a " + role + " name such as " + role + "-0"
		}
		c.errorf(path, "want %s (got %q)", want, name)
		return false
	}
	n := c.s.Cluster.Workers
	if r == roleServer {
		n = c.s.Cluster.Servers
	}
	if scripted {
		for _, a := range c.s.Script {
			if (r == roleServer && a.Action == ActionAddServer) || (r == roleWorker && a.Action == ActionAddWorker) {
				n++
			}
		}
		// EPS multi-job scheduling may grow the job up to its maximum.
		if r == roleServer {
			n = max(n, c.s.Cluster.MaxServers)
		} else {
			n = max(n, c.s.Cluster.MaxWorkers)
		}
	}
	if i >= n {
		c.errorf(path, "no node %s in the cluster (%ss are %s)", name, r, nodeRange(r, n))
		return false
	}
	return true
}

func nodeRange(role string, n int) string {
	switch {
	case n <= 0:
		return "none"
	case n == 1:
		return role + "-0"
	}
	return fmt.Sprintf("%s-0..%s-%d", role, role, n-1)
}

// sortedNodeNames returns the keys of m with node names in role and index
// order and anything else after them.
func sortedNodeNames[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareNodeNames)
	return keys
}

func compareNodeNames(a, b string) int {
	ra, ia, oka := parseNode(a)
	rb, ib, okb := parseNode(b)
	switch {
	case oka && okb:
		if ra != rb {
			return strings.Compare(ra, rb)
		}
		return cmp.Compare(ia, ib)
	case oka:
		return -1
	case okb:
		return 1
	}
	return strings.Compare(a, b)
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
