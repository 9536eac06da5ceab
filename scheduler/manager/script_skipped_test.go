package manager

import (
	"reflect"
	"testing"

	"github.com/kelpie/kelpie/core/spec"
)

// TestSkippedSteps: the steps after the last one carried out are reported,
// in the order they would have run; none when all ran.
func TestSkippedSteps(t *testing.T) {
	s, err := spec.Parse("x.yaml", []byte(`name: x
cluster: {servers: 2, workers: 2}
script:
  - {at: 30s, action: remove-server, node: server-0}
  - {at: 5s, action: add-server}
  - {at: 20s, action: restart, node: worker-1}
`))
	if err != nil {
		t.Fatal(err)
	}
	steps := scriptSteps(s)
	for _, c := range []struct {
		next int
		want []SkippedStep
	}{
		{0, []SkippedStep{{5, "add-server", "server-2"}, {20, "restart", "worker-1"}, {30, "remove-server", "server-0"}}},
		{1, []SkippedStep{{20, "restart", "worker-1"}, {30, "remove-server", "server-0"}}},
		{3, []SkippedStep{}},
		{9, []SkippedStep{}},
	} {
		if got := skippedSteps(steps, c.next); !reflect.DeepEqual(got, c.want) {
			t.Errorf("skippedSteps(next %d) = %v; want %v", c.next, got, c.want)
		}
	}
}
