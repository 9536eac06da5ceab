package tui

import (
	"maps"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
)

func TestEvidenceNow(t *testing.T) {
	job := &consolepb.JobView{
		Monitor: &consolepb.MonitorView{MeanBptS: 0.010},
		Nodes: []*consolepb.NodeView{
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

// TestEvidenceAndDetailWording: evidence reads in ms with three
// significant digits and plain names (no "mean_bpt_per_s=0.0024946893"),
// and a long detail line wraps under its label instead of being cut.
func TestEvidenceAndDetailWording(t *testing.T) {
	got := evidenceText(map[string]float64{"mean_bpt_per_s": 0.002494689333333333, "worker-3/bpt_per_s": 0.0271, "lambda": 1.5, "window_per_s": 20})
	want := "λ 1.5 · mean BPT long 2.49ms · long window 20s · worker-3 BPT long 27.1ms"
	if got != want {
		t.Errorf("evidenceText = %q; want %q", got, want)
	}
	long := "reason     " + strings.Repeat("worker-2 is slow ", 8)
	out := wrapDetail([]string{"title", long}, 60, 11)
	if len(out) < 3 {
		t.Fatalf("wrapDetail did not wrap a %d-cell line at 60: %q", len(long), out)
	}
	for _, l := range out[2:] {
		if !strings.HasPrefix(l, strings.Repeat(" ", 11)) || len(l) > 60 {
			t.Errorf("continuation %q is not indented under the text or is too wide", l)
		}
	}
	if strings.Join(strings.Fields(strings.Join(out[1:], " ")), " ") != strings.Join(strings.Fields(long), " ") {
		t.Errorf("wrapping lost words: %q", out)
	}
	a := &consolepb.Action{Kind: "ADJUST_BS"}
	if onTarget(a) != " on every worker" || iterationText(a) != "" {
		t.Errorf("job-wide action: %q, iteration %q; want \" on every worker\" and nothing for unset iterations", onTarget(a), iterationText(a))
	}
	if plural(1, "server") != "1 server" || plural(2, "server") != "2 servers" {
		t.Error("plural")
	}
}
