package spec

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// YAML returns the spec in canonical form: every key written out, defaults
// included, in the order the package doc lists them, with list entries as
// one-line flow mappings. Parsing the result gives back an equal Spec (the
// Line fields aside, which record where entries sat in the original file).
func (s *Spec) YAML() []byte {
	var b strings.Builder
	w := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat("  ", indent))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}

	w(0, "name: %s", yamlString(s.Name))

	w(0, "model:")
	w(1, "kind: %s", yamlString(s.Model.Kind))
	if len(s.Model.Hidden) > 0 {
		hs := make([]string, len(s.Model.Hidden))
		for i, h := range s.Model.Hidden {
			hs[i] = strconv.Itoa(h)
		}
		w(1, "hidden: [%s]", strings.Join(hs, ", "))
	}
	if s.Model.Script != "" {
		w(1, "script: %s", yamlString(s.Model.Script))
	}
	if s.Model.Threads != 0 {
		w(1, "threads: %d", s.Model.Threads)
	}
	if len(s.Model.Tensors) > 0 {
		w(1, "tensors:")
		for _, t := range s.Model.Tensors {
			w(2, "- {name: %s, rows: %d, cols: %d, sparse: %t}", yamlString(t.Name), t.Rows, t.Cols, t.Sparse)
		}
	}

	w(0, "data:")
	w(1, "kind: %s", yamlString(s.Data.Kind))
	w(1, "epochs: %d", s.Data.Epochs)
	w(1, "batches_per_shard: %d", s.Data.BatchesPerShard)
	w(1, "seed: %d", s.Data.Seed)
	if s.Data.Samples != 0 {
		w(1, "samples: %d", s.Data.Samples)
	}
	if s.Data.TestSamples != 0 {
		w(1, "test_samples: %d", s.Data.TestSamples)
	}
	if s.Data.Features != 0 {
		w(1, "features: %d", s.Data.Features)
	}
	if s.Data.Fields != 0 {
		w(1, "fields: %d", s.Data.Fields)
	}

	w(0, "train:")
	w(1, "global_batch: %d", s.Train.GlobalBatch)
	w(1, "lr: %s", fmtFloat(s.Train.LR))
	w(1, "optimizer: %s", yamlString(s.Train.Optimizer))
	if s.Train.Optimizer == OptimizerMomentum || s.Train.Momentum != 0 {
		w(1, "momentum: %s", fmtFloat(s.Train.Momentum))
	}
	if s.Train.LRDecay != "" && s.Train.LRDecay != LRDecayNone {
		w(1, "lr_decay: %s", yamlString(s.Train.LRDecay))
		w(1, "lr_final: %s", fmtFloat(s.Train.LRFinal))
	}
	if s.Train.HangMin != 0 {
		w(1, "hang_min: %s", fmtDuration(s.Train.HangMin))
	}
	if s.Train.HangFactor != 0 {
		w(1, "hang_factor: %s", fmtFloat(s.Train.HangFactor))
	}

	c := s.Cluster
	w(0, "cluster:")
	w(1, "servers: %d", c.Servers)
	w(1, "workers: %d", c.Workers)
	w(1, "block_bytes: %d", c.BlockBytes)
	w(1, "assignment: %s", yamlString(c.Assignment))
	w(1, "exchange: %s", yamlString(c.Exchange))
	w(1, "transport: %s", yamlString(c.Transport))
	w(1, "data_plane_encryption: %s", yamlString(c.DataPlaneEncryption))
	w(1, "elasticity: %s", yamlString(c.Elasticity))
	w(1, "snapshot_interval: %s", fmtDuration(c.SnapshotInterval))
	for _, k := range []struct {
		key     string
		v, dflt int
	}{{"min_workers", c.MinWorkers, 1}, {"max_workers", c.MaxWorkers, 0}, {"min_servers", c.MinServers, 1}, {"max_servers", c.MaxServers, 0}} {
		if k.v != k.dflt {
			w(1, "%s: %d", k.key, k.v)
		}
	}
	if len(c.Topology) > 0 {
		w(1, "topology:")
		for _, node := range sortedNodeNames(c.Topology) {
			l := c.Topology[node]
			var kv []string
			if l.Rack != "" {
				kv = append(kv, "rack: "+yamlString(l.Rack))
			}
			if l.Pod != "" {
				kv = append(kv, "pod: "+yamlString(l.Pod))
			}
			if l.Host != "" {
				kv = append(kv, "host: "+yamlString(l.Host))
			}
			w(2, "%s: {%s}", yamlString(node), strings.Join(kv, ", "))
		}
	}
	if c.Hosts != "" {
		w(1, "hosts: %s", yamlString(c.Hosts))
	}
	if c.Links != (Links{}) {
		w(1, "links: {%s}", strings.Join(c.Links.fields(), ", "))
	}
	if c.SpareHosts != 0 {
		w(1, "spare_hosts: %d", c.SpareHosts)
	}
	if c.BatchSizes != nil {
		w(1, "batch_sizes: %s", flowIntMap(c.BatchSizes))
	}
	if c.Resources != (Resources{}) {
		w(1, "resources:")
		for _, r := range []struct {
			role string
			res  RoleResources
		}{{"server", c.Resources.Server}, {"worker", c.Resources.Worker}} {
			var kv []string
			if r.res.CPU != "" {
				kv = append(kv, "cpu: "+yamlString(r.res.CPU))
			}
			if r.res.Memory != "" {
				kv = append(kv, "memory: "+yamlString(r.res.Memory))
			}
			if len(kv) > 0 {
				w(2, "%s: {%s}", r.role, strings.Join(kv, ", "))
			}
		}
	}

	w(0, "sync:")
	for _, kv := range syncFields(&s.Sync) {
		w(1, "%s", kv)
	}

	encodePolicies(s, w)

	if len(s.Stragglers) > 0 {
		w(0, "stragglers:")
		for _, st := range s.Stragglers {
			kv := []string{"kind: " + yamlString(st.Kind)}
			if st.Node != "" {
				kv = append([]string{"node: " + yamlString(st.Node)}, kv...)
			}
			if st.Region != "" {
				kv = append(kv, "region: "+yamlString(st.Region))
			}
			used := stragglerKeysByKind[st.Kind]
			if contains(used, "sleep") {
				kv = append(kv, "sleep: "+fmtDuration(st.Sleep))
			}
			if contains(used, "intensity") {
				kv = append(kv, "intensity: "+fmtFloat(st.Intensity))
			}
			if contains(used, "probability") {
				kv = append(kv, "probability: "+fmtFloat(st.Probability))
			}
			if contains(used, "rate") {
				kv = append(kv, "rate: "+FormatRate(st.Rate))
			}
			kv = append(kv, "start: "+fmtDuration(st.Start))
			if st.End != 0 {
				kv = append(kv, "end: "+fmtDuration(st.End))
			}
			if st.Period != 0 || st.On != 0 {
				kv = append(kv, "period: "+fmtDuration(st.Period), "on: "+fmtDuration(st.On))
			}
			if st.FollowsRestart {
				kv = append(kv, "follows_restart: true")
			}
			if st.CuredByRestart {
				kv = append(kv, "cured_by_restart: true")
			}
			w(1, "- {%s}", strings.Join(kv, ", "))
		}
	}

	if len(s.Script) > 0 {
		w(0, "script:")
		for _, st := range s.Script {
			kv := []string{"at: " + fmtDuration(st.At), "action: " + yamlString(st.Action)}
			if st.Node != "" {
				kv = append(kv, "node: "+yamlString(st.Node))
			}
			if st.Sizes != nil {
				kv = append(kv, "sizes: "+flowIntMap(st.Sizes))
			}
			if st.Assignment != "" {
				kv = append(kv, "assignment: "+yamlString(st.Assignment))
			}
			if st.Sync != nil {
				kv = append(kv, syncFields(st.Sync)...)
			}
			w(1, "- {%s}", strings.Join(kv, ", "))
		}
	}
	return []byte(b.String())
}

func syncFields(sy *Sync) []string {
	return []string{
		"model: " + yamlString(sy.Model),
		"staleness: " + strconv.Itoa(sy.Staleness),
		"pull: " + yamlString(sy.Pull),
		fmt.Sprintf("pssp: {c: %s, alpha: %s, dynamic: %t}", fmtFloat(sy.PSSP.C), fmtFloat(sy.PSSP.Alpha), sy.PSSP.Dynamic),
		fmt.Sprintf("drop: {wait_for: %d}", sy.Drop.WaitFor),
	}
}

func flowIntMap(m map[string]int) string {
	kv := make([]string, 0, len(m))
	for _, k := range sortedNodeNames(m) {
		kv = append(kv, fmt.Sprintf("%s: %d", yamlString(k), m[k]))
	}
	return "{" + strings.Join(kv, ", ") + "}"
}

// fmtDuration writes d so that time.ParseDuration gives it back.
func fmtDuration(d time.Duration) string { return d.String() }

// yamlString writes s bare when YAML reads it back as the same string, and
// double-quoted otherwise.
func yamlString(s string) string {
	if plainSafe(s) {
		return s
	}
	return strconv.Quote(s)
}

// plainSafe accepts names made of letters, digits and '-' that start with a
// letter or digit, except null, which YAML reads as no value. Other words
// YAML gives a meaning to (true, off, 12) are read back as written, because
// the decoder takes the text of any scalar given for a string.
func plainSafe(s string) bool {
	if s == "" || s[0] == '-' || strings.EqualFold(s, "null") {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-') {
			return false
		}
	}
	return true
}
