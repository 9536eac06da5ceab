package spec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// decoder turns the YAML tree into a Spec, one key at a time, so that every
// unknown key and badly typed value is reported with its path and line. It
// remembers the line of every key that was given: defaults fill only what is
// absent and validation points at the line of the offending key.
type decoder struct {
	file    string
	errs    Errors
	lines   map[string]int  // key path -> line, for every key given
	bad     map[string]bool // key paths already reported while decoding
	anchors map[string]ast.Node
}

// value is one given (non-null) value.
type value struct {
	path string
	line int      // line of its key, or of the list entry
	node ast.Node // anchors, aliases and tags resolved
}

// mapping is a YAML mapping whose keys have been checked.
type mapping struct {
	path string
	line int
	vals map[string]*value
	keys []string // in file order
}

func (d *decoder) errorf(line int, path, format string, args ...any) {
	if path != "" {
		d.bad[path] = true
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// given reports whether the key at path was in the file (with a non-null value).
func (d *decoder) given(path string) bool {
	_, ok := d.lines[path]
	return ok
}

// lineOf is the line of the key at path or, when it was not given, of its
// nearest given ancestor (or of the document; 0 for an empty one).
func (d *decoder) lineOf(path string) int {
	for path != "" {
		if l, ok := d.lines[path]; ok {
			return l
		}
		path = parentPath(path)
	}
	return d.lines[""] // the document's first line
}

// parentPath strips the last key or index: "a.b[2]" -> "a.b" -> "a" -> "".
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func indexPath(parent string, i int) string { return fmt.Sprintf("%s[%d]", parent, i) }

func lineOfNode(n ast.Node) int {
	if n == nil || n.GetToken() == nil {
		return 0
	}
	return n.GetToken().Position.Line
}

// parse reads src into a tree, records its anchors and returns the single
// document's body (nil for an empty document).
func (d *decoder) parse(src []byte) (ast.Node, bool) {
	f, err := parser.ParseBytes(src, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		line := 0
		msg := err.Error()
		if ye, ok := err.(yaml.Error); ok {
			msg = ye.GetMessage()
			if tk := ye.GetToken(); tk != nil {
				line = tk.Position.Line
			}
		}
		d.errorf(line, "", "invalid YAML: %s", msg)
		return nil, false
	}
	var body ast.Node
	docs := 0
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		docs++
		if docs == 1 {
			body = doc.Body
		} else {
			d.errorf(lineOfNode(doc.Body), "", "a spec is one YAML document; found another")
			return nil, false
		}
		ast.Walk(anchorCollector(d.anchors), doc.Body)
	}
	return body, true
}

type anchorCollector map[string]ast.Node

func (c anchorCollector) Visit(n ast.Node) ast.Visitor {
	if a, ok := n.(*ast.AnchorNode); ok && a.Name != nil {
		c[a.Name.GetToken().Value] = a.Value
	}
	return c
}

// resolve follows anchors, aliases and tags to the node that holds the value.
// It returns nil for a null value.
func (d *decoder) resolve(n ast.Node) ast.Node {
	for range 64 {
		switch v := n.(type) {
		case nil:
			return nil
		case *ast.NullNode:
			return nil
		case *ast.AnchorNode:
			n = v.Value
		case *ast.TagNode:
			n = v.Value
		case *ast.AliasNode:
			if v.Value == nil {
				return nil
			}
			n = d.anchors[v.Value.GetToken().Value]
		default:
			return n
		}
	}
	return nil
}

// describe names a value for a type error.
func describe(n ast.Node) string {
	switch v := n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode:
		return strconv.Quote(v.Value)
	case *ast.LiteralNode:
		return "a block string"
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return n.Type().String()
}

type rawEntry struct {
	key     string
	keyLine int
	val     ast.Node
}

// entries lists the key/value pairs of a mapping node; merge keys (<<) are
// expanded, explicit keys taking precedence over merged ones.
func (d *decoder) entries(path string, n ast.Node, depth int) []rawEntry {
	var pairs []*ast.MappingValueNode
	switch v := n.(type) {
	case *ast.MappingNode:
		pairs = v.Values
	case *ast.MappingValueNode:
		pairs = []*ast.MappingValueNode{v}
	}
	var explicit, merged []rawEntry
	for _, p := range pairs {
		if p == nil || p.Key == nil {
			continue
		}
		keyLine := lineOfNode(p.Key)
		if _, ok := p.Key.(*ast.MergeKeyNode); ok {
			if depth > 16 {
				d.errorf(keyLine, path, "merge keys nested too deeply")
				continue
			}
			src := d.resolve(p.Value)
			var srcs []ast.Node
			if seq, ok := src.(*ast.SequenceNode); ok {
				for _, e := range seq.Values {
					srcs = append(srcs, d.resolve(e))
				}
			} else {
				srcs = []ast.Node{src}
			}
			for _, m := range srcs {
				switch m.(type) {
				case *ast.MappingNode, *ast.MappingValueNode:
					merged = append(merged, d.entries(path, m, depth+1)...)
				case nil:
				default:
					d.errorf(keyLine, path, "<< must merge a mapping, got %s", describe(m))
				}
			}
			continue
		}
		key, ok := keyText(p.Key)
		if !ok {
			d.errorf(keyLine, path, "keys must be plain names, got %s", describe(p.Key))
			continue
		}
		explicit = append(explicit, rawEntry{key: key, keyLine: keyLine, val: p.Value})
	}
	seen := make(map[string]bool, len(explicit))
	for _, e := range explicit {
		seen[e.key] = true
	}
	for _, e := range merged {
		if !seen[e.key] {
			seen[e.key] = true
			explicit = append(explicit, e)
		}
	}
	return explicit
}

func keyText(k ast.Node) (string, bool) {
	switch v := k.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.NullNode, *ast.InfinityNode, *ast.NanNode:
		return v.GetToken().Value, true
	case *ast.TagNode:
		return keyText(v.Value)
	case *ast.AnchorNode:
		return keyText(v.Value)
	}
	return "", false
}

// mapping checks that v is a mapping and that its keys are among allowed (any
// key when allowed is nil), reporting unknown and duplicate keys. Keys with
// null values count as absent. It returns an empty mapping when v is nil or
// not a mapping.
func (d *decoder) mapping(v *value, path string, allowed []string) *mapping {
	m := &mapping{path: path, vals: map[string]*value{}}
	if v == nil {
		return m
	}
	m.line = v.line
	switch v.node.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
	default:
		d.errorf(v.line, path, "want a mapping, got %s", describe(v.node))
		return m
	}
	firstLine := map[string]int{}
	for _, e := range d.entries(path, v.node, 0) {
		p := joinPath(path, e.key)
		if allowed != nil && !contains(allowed, e.key) {
			msg := "unknown key"
			if s := suggest(e.key, allowed); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.errorf(e.keyLine, p, "%s", msg)
			continue
		}
		if l, dup := firstLine[e.key]; dup {
			d.errorf(e.keyLine, p, "duplicate key (first given on line %d)", l)
			continue
		}
		firstLine[e.key] = e.keyLine
		n := d.resolve(e.val)
		if n == nil {
			continue
		}
		d.lines[p] = e.keyLine
		m.vals[e.key] = &value{path: p, line: e.keyLine, node: n}
		m.keys = append(m.keys, e.key)
	}
	return m
}

// sub decodes the mapping under key.
func (d *decoder) sub(m *mapping, key string, allowed []string) *mapping {
	return d.mapping(m.vals[key], joinPath(m.path, key), allowed)
}

func (d *decoder) typeErr(v *value, want string) {
	d.errorf(v.line, v.path, "want %s, got %s", want, describe(v.node))
}

func (d *decoder) str(m *mapping, key string, dst *string) {
	v := m.vals[key]
	if v == nil {
		return
	}
	if s, ok := scalarText(v.node); ok {
		*dst = s
		return
	}
	d.typeErr(v, "a string")
}

// scalarText is the text of a scalar: strings as parsed, and numbers or
// booleans as written (so rack: 1 is the label "1").
func scalarText(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		if v.Value != nil {
			return v.Value.Value, true
		}
		return "", true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return v.GetToken().Value, true
	}
	return "", false
}

// integer reads an integer value; a float or a string is a type error.
func (d *decoder) integer(v *value) (int64, bool) {
	n, ok := v.node.(*ast.IntegerNode)
	if !ok {
		d.typeErr(v, "an integer")
		return 0, false
	}
	switch x := n.Value.(type) {
	case int64:
		return x, true
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), true
		}
	}
	d.errorf(v.line, v.path, "integer %s is too large", n.GetToken().Value)
	return 0, false
}

func (d *decoder) int(m *mapping, key string, dst *int) {
	if v := m.vals[key]; v != nil {
		if x, ok := d.integer(v); ok {
			if x > math.MaxInt || x < math.MinInt {
				d.errorf(v.line, v.path, "integer %d is out of range", x)
				return
			}
			*dst = int(x)
		}
	}
}

func (d *decoder) int64(m *mapping, key string, dst *int64) {
	if v := m.vals[key]; v != nil {
		if x, ok := d.integer(v); ok {
			*dst = x
		}
	}
}

func (d *decoder) uint64(m *mapping, key string, dst *uint64) {
	v := m.vals[key]
	if v == nil {
		return
	}
	n, ok := v.node.(*ast.IntegerNode)
	if !ok {
		d.typeErr(v, "an integer")
		return
	}
	switch x := n.Value.(type) {
	case uint64:
		*dst = x
	case int64:
		if x < 0 {
			d.errorf(v.line, v.path, "must be at least 1 (got %d)", x)
			return
		}
		*dst = uint64(x)
	}
}

// number reads a finite number. Plain scalars such as 1e+06, which the YAML
// parser leaves as strings, are read as numbers too; quoted strings are not.
func (d *decoder) number(v *value) (float64, bool) {
	switch n := v.node.(type) {
	case *ast.IntegerNode:
		switch x := n.Value.(type) {
		case int64:
			return float64(x), true
		case uint64:
			return float64(x), true
		}
	case *ast.FloatNode:
		if !math.IsInf(n.Value, 0) && !math.IsNaN(n.Value) {
			return n.Value, true
		}
	case *ast.StringNode:
		if n.Token != nil && n.Token.Type == token.StringType {
			if f, err := strconv.ParseFloat(n.Value, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, true
			}
		}
	}
	d.typeErr(v, "a number")
	return 0, false
}

func (d *decoder) float(m *mapping, key string, dst *float64) {
	if v := m.vals[key]; v != nil {
		if f, ok := d.number(v); ok {
			*dst = f
		}
	}
}

func (d *decoder) bool(m *mapping, key string, dst *bool) {
	v := m.vals[key]
	if v == nil {
		return
	}
	if b, ok := v.node.(*ast.BoolNode); ok {
		*dst = b.Value
		return
	}
	d.typeErr(v, "true or false")
}

// duration reads a Go duration such as 5s, 200ms or 1m30s; a bare 0 is zero.
func (d *decoder) duration(m *mapping, key string, dst *time.Duration) {
	v := m.vals[key]
	if v == nil {
		return
	}
	switch n := v.node.(type) {
	case *ast.StringNode:
		if t, err := time.ParseDuration(strings.TrimSpace(n.Value)); err == nil {
			*dst = t
			return
		}
	case *ast.IntegerNode:
		if x, ok := n.Value.(int64); ok && x == 0 {
			*dst = 0
			return
		}
		if x, ok := n.Value.(uint64); ok && x == 0 {
			*dst = 0
			return
		}
	}
	d.typeErr(v, "a duration like 5s or 200ms")
}

// size reads a byte count: an integer or a string such as 4MiB.
func (d *decoder) size(m *mapping, key string, dst *int64) {
	v := m.vals[key]
	if v == nil {
		return
	}
	if n, ok := v.node.(*ast.StringNode); ok {
		b, err := ParseSize(n.Value)
		if err != nil {
			d.errorf(v.line, v.path, "want a size like 4194304 or 4MiB: %v", err)
			return
		}
		if b != math.Trunc(b) || b > math.MaxInt64 || b < math.MinInt64 {
			d.errorf(v.line, v.path, "want a whole number of bytes, got %s", describe(n))
			return
		}
		*dst = int64(b)
		return
	}
	if x, ok := d.integer(v); ok {
		*dst = x
	}
}

// rate reads bytes per second: a string such as 20MiB/s or a number.
func (d *decoder) rate(m *mapping, key string, dst *float64) {
	v := m.vals[key]
	if v == nil {
		return
	}
	if n, ok := v.node.(*ast.StringNode); ok {
		r, err := ParseRate(n.Value)
		if err != nil {
			d.errorf(v.line, v.path, "%v, got %s", err, describe(n))
			return
		}
		*dst = r
		return
	}
	if f, ok := d.number(v); ok {
		*dst = f
	}
}

// ints reads a list of integers.
func (d *decoder) ints(m *mapping, key string, dst *[]int) {
	v := m.vals[key]
	if v == nil {
		return
	}
	seq, ok := v.node.(*ast.SequenceNode)
	if !ok {
		d.typeErr(v, "a list of integers")
		return
	}
	out := []int{}
	for i, e := range seq.Values {
		ev := &value{path: indexPath(v.path, i), line: lineOfNode(e), node: d.resolve(e)}
		if ev.node == nil {
			d.errorf(ev.line, ev.path, "want an integer, got null")
			continue
		}
		d.lines[ev.path] = ev.line
		if x, ok := d.integer(ev); ok {
			if x > math.MaxInt || x < math.MinInt {
				d.errorf(ev.line, ev.path, "integer %d is out of range", x)
				continue
			}
			out = append(out, int(x))
		}
	}
	*dst = out
}

// intMap reads a mapping of names to integers.
func (d *decoder) intMap(m *mapping, key string, dst *map[string]int) {
	if m.vals[key] == nil {
		return
	}
	sub := d.sub(m, key, nil)
	out := make(map[string]int, len(sub.keys))
	for _, k := range sub.keys {
		var x int
		d.int(sub, k, &x)
		out[k] = x
	}
	*dst = out
}

// list returns the entries of the list under key, each with its path and line.
func (d *decoder) list(m *mapping, key string) []*value {
	v := m.vals[key]
	if v == nil {
		return nil
	}
	seq, ok := v.node.(*ast.SequenceNode)
	if !ok {
		d.typeErr(v, "a list")
		return nil
	}
	out := make([]*value, 0, len(seq.Values))
	for i, e := range seq.Values {
		ev := &value{path: indexPath(v.path, i), line: lineOfNode(e), node: d.resolve(e)}
		if n, ok := e.(*ast.AnchorNode); ok {
			ev.line = lineOfNode(n.Value)
		}
		if ev.node == nil {
			d.errorf(ev.line, ev.path, "empty list entry")
			continue
		}
		d.lines[ev.path] = ev.line
		out = append(out, ev)
	}
	return out
}

var (
	topKeys        = []string{"name", "model", "data", "train", "cluster", "sync", "policies", "stragglers", "script"}
	modelKeys      = []string{"kind", "hidden", "script", "threads", "tensors"}
	tensorKeys     = []string{"name", "rows", "cols", "sparse"}
	dataKeys       = []string{"kind", "epochs", "batches_per_shard", "seed", "samples", "test_samples", "features", "fields"}
	trainKeys      = []string{"global_batch", "lr", "optimizer", "momentum", "lr_decay", "lr_final", "hang_min", "hang_factor"}
	clusterKeys    = []string{"servers", "workers", "block_bytes", "assignment", "exchange", "transport", "data_plane_encryption", "elasticity", "snapshot_interval", "topology", "hosts", "links", "batch_sizes", "min_workers", "max_workers", "min_servers", "max_servers", "resources", "spare_hosts"}
	resourceKeys   = []string{"server", "worker"}
	roleResKeys    = []string{"cpu", "memory"}
	labelKeys      = []string{"rack", "pod", "host"}
	syncKeys       = []string{"model", "staleness", "pull", "pssp", "drop"}
	psspKeys       = []string{"c", "alpha", "dynamic"}
	dropKeys       = []string{"wait_for"}
	stragglerKeys  = []string{"node", "kind", "sleep", "intensity", "probability", "start", "end", "period", "on", "rate", "region", "follows_restart", "cured_by_restart"}
	scriptBaseKeys = []string{"at", "action", "node", "sizes", "assignment"}
	scriptKeys     = append(append([]string{}, scriptBaseKeys...), syncKeys...)
)

// decode reads the document body into s. It reports type errors and unknown
// keys; values are checked later by validate.
func (d *decoder) decode(body ast.Node, s *Spec) {
	var root *value
	if body != nil {
		root = &value{line: lineOfNode(body), node: d.resolve(body)}
		if root.node == nil {
			root = nil
		} else {
			d.lines[""] = root.line
		}
	}
	top := d.mapping(root, "", topKeys)
	d.str(top, "name", &s.Name)

	model := d.sub(top, "model", modelKeys)
	d.str(model, "kind", &s.Model.Kind)
	d.ints(model, "hidden", &s.Model.Hidden)
	d.str(model, "script", &s.Model.Script)
	d.int(model, "threads", &s.Model.Threads)
	for _, e := range d.list(model, "tensors") {
		m := d.mapping(e, e.path, tensorKeys)
		t := Tensor{Line: e.line}
		d.str(m, "name", &t.Name)
		d.int(m, "rows", &t.Rows)
		d.int(m, "cols", &t.Cols)
		d.bool(m, "sparse", &t.Sparse)
		s.Model.Tensors = append(s.Model.Tensors, t)
	}

	data := d.sub(top, "data", dataKeys)
	d.str(data, "kind", &s.Data.Kind)
	d.int(data, "epochs", &s.Data.Epochs)
	d.int(data, "batches_per_shard", &s.Data.BatchesPerShard)
	d.int64(data, "seed", &s.Data.Seed)
	d.int(data, "samples", &s.Data.Samples)
	d.int(data, "test_samples", &s.Data.TestSamples)
	d.uint64(data, "features", &s.Data.Features)
	d.int(data, "fields", &s.Data.Fields)

	train := d.sub(top, "train", trainKeys)
	d.int(train, "global_batch", &s.Train.GlobalBatch)
	d.float(train, "lr", &s.Train.LR)
	d.str(train, "optimizer", &s.Train.Optimizer)
	d.float(train, "momentum", &s.Train.Momentum)
	d.str(train, "lr_decay", &s.Train.LRDecay)
	d.float(train, "lr_final", &s.Train.LRFinal)
	d.duration(train, "hang_min", &s.Train.HangMin)
	d.float(train, "hang_factor", &s.Train.HangFactor)

	cl := d.sub(top, "cluster", clusterKeys)
	c := &s.Cluster
	d.int(cl, "servers", &c.Servers)
	d.int(cl, "workers", &c.Workers)
	d.size(cl, "block_bytes", &c.BlockBytes)
	d.str(cl, "assignment", &c.Assignment)
	d.str(cl, "exchange", &c.Exchange)
	d.str(cl, "transport", &c.Transport)
	d.str(cl, "data_plane_encryption", &c.DataPlaneEncryption)
	d.str(cl, "elasticity", &c.Elasticity)
	d.duration(cl, "snapshot_interval", &c.SnapshotInterval)
	if cl.vals["topology"] != nil {
		topo := d.sub(cl, "topology", nil)
		c.Topology = make(map[string]Labels, len(topo.keys))
		for _, node := range topo.keys {
			lm := d.sub(topo, node, labelKeys)
			var l Labels
			d.str(lm, "rack", &l.Rack)
			d.str(lm, "pod", &l.Pod)
			d.str(lm, "host", &l.Host)
			c.Topology[node] = l
		}
	}
	d.decodeNetwork(cl, c)
	d.intMap(cl, "batch_sizes", &c.BatchSizes)
	d.int(cl, "min_workers", &c.MinWorkers)
	d.int(cl, "max_workers", &c.MaxWorkers)
	d.int(cl, "min_servers", &c.MinServers)
	d.int(cl, "max_servers", &c.MaxServers)
	d.int(cl, "spare_hosts", &c.SpareHosts)
	res := d.sub(cl, "resources", resourceKeys)
	for _, r := range []struct {
		key string
		dst *RoleResources
	}{{"server", &c.Resources.Server}, {"worker", &c.Resources.Worker}} {
		rm := d.sub(res, r.key, roleResKeys)
		d.str(rm, "cpu", &r.dst.CPU)
		d.str(rm, "memory", &r.dst.Memory)
	}

	d.decodeSync(d.sub(top, "sync", syncKeys), &s.Sync)

	d.decodePolicies(top, s)

	for _, e := range d.list(top, "stragglers") {
		m := d.mapping(e, e.path, stragglerKeys)
		st := Straggler{Line: e.line}
		d.str(m, "node", &st.Node)
		d.str(m, "kind", &st.Kind)
		d.duration(m, "sleep", &st.Sleep)
		d.float(m, "intensity", &st.Intensity)
		d.float(m, "probability", &st.Probability)
		d.duration(m, "start", &st.Start)
		d.duration(m, "end", &st.End)
		d.duration(m, "period", &st.Period)
		d.duration(m, "on", &st.On)
		d.rate(m, "rate", &st.Rate)
		d.str(m, "region", &st.Region)
		d.bool(m, "follows_restart", &st.FollowsRestart)
		d.bool(m, "cured_by_restart", &st.CuredByRestart)
		s.Stragglers = append(s.Stragglers, st)
	}

	for _, e := range d.list(top, "script") {
		m := d.mapping(e, e.path, scriptKeys)
		st := ScriptStep{Line: e.line}
		d.duration(m, "at", &st.At)
		d.str(m, "action", &st.Action)
		d.str(m, "node", &st.Node)
		d.intMap(m, "sizes", &st.Sizes)
		d.str(m, "assignment", &st.Assignment)
		var sy Sync
		d.decodeSync(m, &sy)
		if st.Action == ActionSetSync {
			st.Sync = &sy
		}
		s.Script = append(s.Script, st)
	}
}

// decodeSync reads the sync keys of m: the sync section, or a set-sync step.
func (d *decoder) decodeSync(m *mapping, sy *Sync) {
	d.str(m, "model", &sy.Model)
	d.int(m, "staleness", &sy.Staleness)
	d.str(m, "pull", &sy.Pull)
	pssp := d.sub(m, "pssp", psspKeys)
	d.float(pssp, "c", &sy.PSSP.C)
	d.float(pssp, "alpha", &sy.PSSP.Alpha)
	d.bool(pssp, "dynamic", &sy.PSSP.Dynamic)
	drop := d.sub(m, "drop", dropKeys)
	d.int(drop, "wait_for", &sy.Drop.WaitFor)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns the allowed key closest to key when it is close enough to
// be a likely typo (at most two edits, and fewer than half its length),
// else "".
func suggest(key string, allowed []string) string {
	best, bestDist := "", 3
	for _, a := range allowed {
		dist := editDistance(strings.ToLower(key), a)
		if dist < bestDist && 2*dist <= len(key) {
			best, bestDist = a, dist
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours each cost 1.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		if a == b {
			return 0
		}
		return 64
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
