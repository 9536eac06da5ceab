package forms

import (
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

var current = map[string]int32{"worker-0": 64, "worker-1": 64, "worker-2": 64, "worker-3": 64}

func TestBatchSizes(t *testing.T) {
	good := []struct {
		text string
		want map[string]int32
	}{
		{"worker-0=80 worker-1=80 worker-2=16 worker-3=80", map[string]int32{"worker-0": 80, "worker-1": 80, "worker-2": 16, "worker-3": 80}},
		{"worker-2=32, worker-0=96", map[string]int32{"worker-2": 32, "worker-0": 96}}, // the others keep 64
		{"worker-1:64", map[string]int32{"worker-1": 64}},
	}
	for _, g := range good {
		got, err := BatchSizes(g.text, current, 256)
		if err != nil || len(got) != len(g.want) {
			t.Errorf("BatchSizes(%q) = %v, %v; want %v", g.text, got, err, g.want)
			continue
		}
		for k, v := range g.want {
			if got[k] != v {
				t.Errorf("BatchSizes(%q)[%s] = %d; want %d", g.text, k, got[k], v)
			}
		}
	}
	bad := []struct{ text, want string }{
		{"worker-0=100 worker-1=100 worker-2=16 worker-3=80", "batch sizes sum to 296; the global batch is 256"},
		{"worker-0=65", "sum to 257"},
		{"worker-9=64", "unknown node worker-9 (the job's workers are worker-0, worker-1, worker-2, worker-3)"},
		{"server-0=64", "unknown node server-0"},
		{"worker-0=0 worker-1=128", "batch size for worker-0 must be a positive integer, not \"0\""},
		{"worker-0=big", `not "big"`},
		{"worker-0", `"worker-0" is not worker=size`},
		{"worker-0=32 worker-0=96", "worker-0 is given twice"},
		{"   ", "no batch sizes"},
	}
	for _, b := range bad {
		if _, err := BatchSizes(b.text, current, 256); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("BatchSizes(%q) = %v; want an error containing %q", b.text, err, b.want)
		}
	}
	if got := FormatBatchSizes([]string{"worker-1", "worker-0"}, current); got != "worker-1=64 worker-0=64" {
		t.Errorf("FormatBatchSizes = %q", got)
	}
}

func TestNode(t *testing.T) {
	nodes := map[string]string{"server-0": "server", "server-1": "server", "worker-0": "worker"}
	cases := []struct{ name, role, want string }{
		{"server-1", "server", ""},
		{"worker-0", "", ""},
		{" worker-0 ", "worker", ""},
		{"", "", "a node name is required"},
		{"worker-7", "worker", "unknown node worker-7 (the job has worker-0)"},
		{"worker-0", "server", "worker-0 is a worker, not a server"},
	}
	for _, c := range cases {
		err := Node(c.name, nodes, c.role)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Node(%q, %q) = %v; want %q", c.name, c.role, err, c.want)
		}
	}
}

func TestJobName(t *testing.T) {
	cases := []struct{ name, want string }{
		{"mnist-mlp", ""}, {"a", ""}, {"j2", ""},
		{"", "a name is required"}, {"  ", "a name is required"},
		{"Mnist", "may use only"}, {"-x", "may use only"}, {"x-", "may use only"}, {"a_b", "may use only"},
		{strings.Repeat("a", 64), "longer than 63"},
	}
	for _, c := range cases {
		err := JobName(c.name)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("JobName(%q) = %v; want %q", c.name, err, c.want)
		}
	}
}

func TestModesAndParams(t *testing.T) {
	// The mode key never reaches auto, from any mode.
	for m, next := range map[string]string{"auto": "approve", "approve": "off", "off": "approve", "weird": "approve"} {
		if got := ToggleMode(m); got != next {
			t.Errorf("ToggleMode(%q) = %q; want %q", m, got, next)
		}
	}
	if err := Mode("sometimes"); err == nil {
		t.Error("Mode(sometimes) = nil; want an error")
	}
	if v, err := Param("lambda", " 1.5 "); err != nil || v != 1.5 {
		t.Errorf("Param(1.5) = %v, %v", v, err)
	}
	for _, s := range []string{"", "x", "-1"} {
		if _, err := Param("lambda", s); err == nil {
			t.Errorf("Param(%q) = nil error", s)
		}
	}
	pm, err := PolicyModes("antdt-nd=auto, psld=off")
	if err != nil || pm["antdt-nd"] != "auto" || pm["psld"] != "off" {
		t.Errorf("PolicyModes = %v, %v", pm, err)
	}
	for _, s := range []string{"nope=auto", "psld=maybe", "psld"} {
		if _, err := PolicyModes(s); err == nil {
			t.Errorf("PolicyModes(%q) = nil error", s)
		}
	}
}

func launchFields() map[string]string {
	return map[string]string{
		FieldName: "cifar-x", FieldModel: "mlp", FieldData: "mnist", FieldServers: "2", FieldWorkers: "4",
		FieldBatch: "256", FieldSync: "ssp", FieldStaleness: "3", FieldPolicies: "antdt-nd=approve psld=off",
	}
}

func TestParseLaunch(t *testing.T) {
	l, errs := ParseLaunch(launchFields())
	if len(errs) != 0 {
		t.Fatalf("ParseLaunch(good) errors %v", errs)
	}
	spec := l.YAML()
	want := `name: cifar-x
model: {kind: mlp}
data: {kind: mnist}
train: {global_batch: 256}
cluster: {servers: 2, workers: 4}
sync: {model: ssp, staleness: 3}
policies:
  antdt-nd: {mode: approve}
  psld: {mode: off}
`
	if spec != want {
		t.Errorf("YAML() =\n%s\nwant\n%s", spec, want)
	}
	var parsed map[string]any
	if err := yaml.Unmarshal([]byte(spec), &parsed); err != nil {
		t.Errorf("YAML() does not parse: %v", err)
	}

	bad := []struct {
		field, value, want string
	}{
		{FieldName, "", "a name is required"},
		{FieldName, "Bad Name", "may use only"},
		{FieldModel, "resnet", `model "resnet" is not one of softmax, mlp, sparse-lr`},
		{FieldData, "imagenet", "data"},
		{FieldServers, "0", "servers must be a positive integer"},
		{FieldWorkers, "four", "workers must be a positive integer"},
		{FieldBatch, "2", "global batch 2 is smaller than the 4 workers"},
		{FieldSync, "gossip", "sync"},
		{FieldStaleness, "-1", "staleness must be a positive integer"},
		{FieldPolicies, "psld=sometimes", "psld: mode"},
	}
	for _, b := range bad {
		f := launchFields()
		f[b.field] = b.value
		_, errs := ParseLaunch(f)
		if !strings.Contains(errs[b.field], b.want) || len(errs) != 1 {
			t.Errorf("ParseLaunch(%s=%q) errors %v; want only %s: %q", b.field, b.value, errs, b.field, b.want)
		}
	}
	f := launchFields()
	f[FieldSync], f[FieldStaleness] = "bsp", "oops" // staleness is ignored for bsp
	if l, errs := ParseLaunch(f); len(errs) != 0 || strings.Contains(l.YAML(), "staleness") {
		t.Errorf("ParseLaunch(bsp with staleness) = %v", errs)
	}
}
