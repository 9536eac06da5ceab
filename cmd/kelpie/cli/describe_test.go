package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// TestDescribeJSON: `job describe --json` prints one object (not an array
// of one), its 64-bit counts as JSON numbers like its 32-bit ones; `job
// list --json` an array of such objects; the text form prints a policy's
// parameters as key=value, not as a Go map.
func TestDescribeJSON(t *testing.T) {
	d, dir := testScheduler(t)
	p := filepath.Join(dir, "j.yaml")
	if err := os.WriteFile(p, []byte("name: j\nmodel: {kind: softmax}\ndata: {kind: mnist, seed: 1}\ncluster: {workers: 3, servers: 1}\n"+
		"policies: {antdt-nd: {mode: off, lambda: 1.5}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--scheduler", d.HTTPAddr(), "--token", "optok"}
	if code, _ := runStdout(t, append([]string{"job", "submit", p}, conn...)...); code != 0 {
		t.Fatalf("submit: exit %d", code)
	}
	code, out := runStdout(t, append([]string{"job", "describe", "j", "--json"}, conn...)...)
	if code != 0 {
		t.Fatalf("describe --json: exit %d", code)
	}
	var job map[string]any
	if err := json.Unmarshal([]byte(out), &job); err != nil {
		t.Fatalf("describe --json is not one object: %v\n%s", err, out)
	}
	if job["name"] != "j" {
		t.Errorf("name %v", job["name"])
	}
	for _, k := range []string{"iterations", "shardsTotal", "shardsTodo", "workers"} {
		if _, ok := job[k].(float64); !ok {
			t.Errorf("%s = %#v; want a JSON number", k, job[k])
		}
	}
	code, out = runStdout(t, append([]string{"job", "list", "--json"}, conn...)...)
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 1 {
		t.Fatalf("list --json: exit %d, %v\n%s", code, err, out)
	}
	if _, ok := list[0]["iterations"].(float64); !ok {
		t.Errorf("list: iterations = %#v; want a number", list[0]["iterations"])
	}
	code, out = runStdout(t, append([]string{"job", "describe", "j"}, conn...)...)
	if code != 0 || !strings.Contains(out, "lambda=1.5") || strings.Contains(out, "map[") {
		t.Errorf("describe: exit %d; want the parameters as key=value:\n%s", code, out)
	}
}

// TestProtoJSON: 64-bit integers become numbers wherever they are (nested
// messages, lists, map values); timestamps, 32-bit fields and doubles keep
// protojson's forms.
func TestProtoJSON(t *testing.T) {
	v := &consolepb.JobView{Name: "x", Iteration: 1430, Workers: 3, Throughput: 2.5, Submitted: timestamppb.New(timestamppb.Now().AsTime()),
		Nodes:   []*consolepb.NodeView{{Name: "worker-0", Iteration: 1400, Pid: 7}},
		Actions: []*consolepb.Action{{Id: "a-1", AppliedIteration: 99, BatchSizes: map[string]int32{"worker-0": 16}}}}
	b, err := protoJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"iteration":1430`, `"iteration":1400`, `"appliedIteration":99`, `"workers":3`, `"throughput":2.5`, `"worker-0":16`, `"submitted":"`} {
		if !strings.Contains(s, want) {
			t.Errorf("%s lacks %s", s, want)
		}
	}
}
