package tui

import (
	"maps"
	"testing"

	"github.com/kelpie/kelpie/proto/kelpiepb"
)

func TestEvidenceNow(t *testing.T) {
	job := &kelpiepb.JobView{
		Monitor: &kelpiepb.MonitorView{MeanBptS: 0.010},
		Nodes: []*kelpiepb.NodeView{
			{Name: "worker-2", BptLongS: 0.002, BptShortS: 0.0281, Throughput: 8000},
			{Name: "worker-3"}, // no report yet
		},
	}
	for _, c := range []struct {
		name string
		ev   map[string]float64
		want map[string]float64
	}{
		{"the straggler recovered", map[string]float64{"worker-2/bpt_per_s": 0.028, "lambda": 1.5}, map[string]float64{"worker-2/bpt_per_s": 0.002}},
		{"within 5 % is the same", map[string]float64{"worker-2/bpt_trans_s": 0.028, "mean_bpt_trans_s": 0.0101}, map[string]float64{}},
		{"mean and throughput moved", map[string]float64{"mean_bpt_trans_s": 0.02, "worker-2/throughput": 4000}, map[string]float64{"mean_bpt_trans_s": 0.010, "worker-2/throughput": 8000}},
		{"no figure yet is not 0", map[string]float64{"worker-3/bpt_per_s": 0.05, "worker-9/throughput": 10}, map[string]float64{}},
	} {
		if got := evidenceNow(c.ev, job); !maps.Equal(got, c.want) {
			t.Errorf("%s: evidenceNow(%v) = %v; want %v", c.name, c.ev, got, c.want)
		}
	}
	if got := evidenceNow(map[string]float64{"worker-2/bpt_per_s": 1}, nil); len(got) != 0 {
		t.Errorf("evidenceNow without a job view = %v; want nothing", got)
	}
}

// TestReasonShowsNow: the action's detail shows, beside its reason, the
// current figure that has moved since the proposal.
func TestReasonShowsNow(t *testing.T) {
	j := mnistJob()
	for _, a := range j.Actions {
		if a.Id == "a-7" {
			a.Evidence = map[string]float64{"worker-2/bpt_per_s": 0.62}
		}
	}
	for _, n := range j.Nodes {
		if n.Name == "worker-2" {
			n.BptLongS = 0.031
		}
	}
	tm := run(t, &fakeBackend{}, "operator", false, 160, 48)
	openJob(t, tm, j)
	press(tm, "A")
	waitText(t, tm, "now worker-2 BPT long 31ms")
	tm.Quit()
	tm.WaitFinished(t)
}
