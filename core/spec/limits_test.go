package spec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLimits checks each bound: the spec is refused at the key and line
// that exceeds it, and accepted once the bound is raised.
func TestLimits(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		line  int
		path  string
		msg   string
		raise string // the --spec-limit that admits it
	}{
		{"workers", "name: x\ncluster: {workers: 100000, servers: 1}\ntrain: {global_batch: 200000}\n", 2, "cluster.workers", "at most 1024", "workers=100000"},
		{"servers", "name: x\ncluster:\n  servers: 50000\n", 3, "cluster.servers", "at most 256", "servers=50000"},
		{"max workers", "name: x\ncluster: {workers: 2, max_workers: 2000}\ntrain: {global_batch: 4096}\n", 2, "cluster.max_workers", "at most 1024", "workers=2000"},
		{"scripted adds", "name: x\ncluster: {servers: 256}\nscript:\n  - {at: 1s, action: add-server}\n", 3, "script", "adds 1 servers to 256", "servers=257"},
		{"hidden width", "name: x\nmodel: {kind: mlp, hidden: [4000000000]}\n", 2, "model.hidden[0]", "at most 65536", "hidden_width=4000000000 params=4000000000000 blocks=10000000"},
		{"hidden layers", "name: x\nmodel: {kind: mlp, hidden: [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}\n", 2, "model.hidden", "at most 16", "hidden_layers=17"},
		{"params", "name: x\nmodel: {kind: mlp, hidden: [65536, 65536]}\n", 2, "model.hidden", "parameters", "params=10000000000"},
		{"features", "name: x\nmodel: {kind: sparse-lr}\ndata: {features: 100000000000}\n", 3, "data.features", "at most 268435456", "features=100000000000 params=100000000002"},
		{"fields", "name: x\nmodel: {kind: sparse-lr}\ndata: {fields: 5000}\n", 3, "data.fields", "at most 4096", "fields=5000"},
		{"block bytes low", "name: x\ncluster: {block_bytes: 16}\n", 2, "cluster.block_bytes", "at least 1024", "min_block_bytes=16"},
		{"block bytes high", "name: x\ncluster: {block_bytes: 1073741824}\n", 2, "cluster.block_bytes", "at most 268435456", "max_block_bytes=1073741824"},
		{"blocks", "name: x\nmodel: {kind: sparse-lr}\ndata: {features: 268435455}\ncluster: {block_bytes: 1024}\n", 4, "cluster.block_bytes", "blocks", "blocks=2000000"},
		{"samples", "name: x\nmodel: {kind: sparse-lr}\ndata: {samples: 9000000000000, batches_per_shard: 100000}\n", 3, "data.samples", "at most 134217728", "samples=9000000000000"},
		{"test samples", "name: x\nmodel: {kind: sparse-lr}\ndata: {test_samples: 900000000}\n", 3, "data.test_samples", "at most", "samples=900000000"},
		{"epochs", "name: x\ndata: {epochs: 100000}\n", 2, "data.epochs", "at most 1000", "epochs=100000 shards=100000000"},
		{"global batch", "name: x\ntrain: {global_batch: 10000000}\n", 2, "train.global_batch", "at most 1048576", "global_batch=10000000"},
		{"shards", "name: x\ndata: {epochs: 1000, batches_per_shard: 1}\ntrain: {global_batch: 1}\n", 2, "data.batches_per_shard", "shards", "shards=60000000"},
		{"stragglers", "name: x\nstragglers:\n" + strings.Repeat("  - {node: worker-0, kind: pause}\n", 1025), 2, "stragglers", "at most 1024", "stragglers=1025"},
		{"script", "name: x\ncluster: {workers: 2}\nscript:\n" + strings.Repeat("  - {at: 1s, action: restart, node: worker-0}\n", 1025), 3, "script", "at most 1024", "script=1025"},
		{"spec bytes", "name: x\n#" + strings.Repeat("x", 1<<20) + "\n", 0, "", "spec too large (limit 1048576 bytes", "spec_bytes=2000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.src))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("Parse: %v, want Errors", err)
			}
			found := false
			for _, e := range es {
				if e.Line == tt.line && e.Path == tt.path && strings.Contains(e.Msg, tt.msg) {
					found = true
				}
			}
			if !found {
				t.Fatalf("want f.yaml:%d: %s: …%s…; got\n%v", tt.line, tt.path, tt.msg, err)
			}
			if !strings.Contains(err.Error(), "--spec-limit") {
				t.Errorf("error does not say which limit to raise: %v", err)
			}
			lim := DefaultLimits()
			for _, kv := range strings.Fields(tt.raise) {
				if err := lim.Set(kv); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := ParseLimits("f.yaml", []byte(tt.src), lim); err != nil && strings.Contains(err.Error(), "--spec-limit") {
				t.Errorf("with %s still refused: %v", tt.raise, err)
			}
		})
	}
}

// TestLimitsAdmitExamples: the default bounds admit every shipped example
// (checked in the examples package too) and a large but sane spec.
func TestLimitsAdmitBigSane(t *testing.T) {
	src := "name: x\nmodel: {kind: sparse-lr}\ndata: {features: 10000000, samples: 500000}\ncluster: {workers: 1024, servers: 256}\ntrain: {global_batch: 4096}\n"
	if _, err := Parse("f.yaml", []byte(src)); err != nil {
		t.Fatal(err)
	}
}

func TestLimitSet(t *testing.T) {
	var l Limits
	for _, bad := range []string{"workers", "nope=3", "workers=0", "workers=-1", "workers=x"} {
		if err := l.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
	if err := l.Set("max-block-bytes=7"); err != nil || l.MaxBlockBytes != 7 {
		t.Errorf("Set: %v %d", err, l.MaxBlockBytes)
	}
	if !strings.Contains(DefaultLimits().String(), "workers=1024") {
		t.Error(DefaultLimits().String())
	}
	if _, err := ParseLimits("f.yaml", []byte("name: x\ncluster: {workers: 5000}\ntrain: {global_batch: 8192}\n"), Unlimited()); err != nil {
		t.Error(err)
	}
}

// TestLimitsAdmitExamples: the default bounds admit every shipped spec.
func TestLimitsAdmitExamples(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	more, _ := filepath.Glob("../../examples/*/*.yaml")
	files = append(files, more...)
	if len(files) == 0 {
		t.Fatal("no examples found")
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(f, src); err != nil && strings.Contains(err.Error(), "--spec-limit") {
			t.Errorf("%s: %v", f, err)
		}
	}
}
