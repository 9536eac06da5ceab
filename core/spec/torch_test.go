package spec

import (
	"reflect"
	"strings"
	"testing"
)

func TestTorchSpec(t *testing.T) {
	src := `name: cnn
model:
  kind: torch
  script: examples/torch/mnist_cnn.py
  tensors:
    - {name: conv1.weight, rows: 8, cols: 9}
    - {name: emb.weight, rows: 16777216, cols: 8, sparse: true}
data: {epochs: 2, samples: 600, test_samples: 100}
`
	s, err := Parse("spec.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if s.Data.Kind != DataTorch || s.Model.Threads != 1 || s.Model.Script != "examples/torch/mnist_cnn.py" {
		t.Fatalf("defaults: data.kind %q threads %d script %q", s.Data.Kind, s.Model.Threads, s.Model.Script)
	}
	want := []Tensor{{Name: "conv1.weight", Rows: 8, Cols: 9, Line: 6}, {Name: "emb.weight", Rows: 1 << 24, Cols: 8, Sparse: true, Line: 7}}
	if !reflect.DeepEqual(s.Model.Tensors, want) {
		t.Fatalf("tensors %+v, want %+v", s.Model.Tensors, want)
	}
	again, err := Parse("again.yaml", s.YAML())
	if err != nil {
		t.Fatalf("canonical form does not parse: %v\n%s", err, s.YAML())
	}
	for i := range again.Model.Tensors {
		again.Model.Tensors[i].Line = s.Model.Tensors[i].Line
	}
	if !reflect.DeepEqual(again.Model, s.Model) || !reflect.DeepEqual(again.Data, s.Data) {
		t.Fatalf("round trip: %+v %+v, want %+v %+v", again.Model, again.Data, s.Model, s.Data)
	}
}

func TestTorchSpecBad(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"name: x\nmodel: {kind: torch}\n", "spec.yaml:2: model.script: required for kind torch"},
		{"name: x\nmodel: {kind: mlp, script: a.py}\n", "spec.yaml:2: model.script: only used by kind torch (kind is mlp)"},
		{"name: x\nmodel: {kind: torch, script: a.py}\ndata: {kind: mnist}\n", "model torch trains on torch data, not mnist"},
		{"name: x\nmodel: {kind: torch, script: a.py, threads: 0}\n", "spec.yaml:2: model.threads: must be at least 1 (got 0)"},
		{"name: x\nmodel:\n  kind: torch\n  script: a.py\n  tensors:\n    - {name: a, rows: 1, cols: 1, sparse: true}\n    - {name: b, rows: 0, cols: 1, sparse: true}\n",
			"spec.yaml:7: model.tensors[1].sparse: a model has at most one sparse tensor"},
		{"name: x\nmodel:\n  kind: torch\n  script: a.py\n  tensors:\n    - {name: a, rows: 1, cols: 1, colour: red}\n",
			"spec.yaml:6: model.tensors[0].colour: unknown key"},
		{"name: x\nmodel: {kind: torch, script: a.py}\ncluster: {servers: 0, exchange: ring}\n", "model torch trains against parameter servers: use exchange ps"},
	} {
		_, err := Parse("spec.yaml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.src, err, tc.want)
		}
	}
}
