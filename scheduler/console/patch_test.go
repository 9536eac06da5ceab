package console

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
	consoleclient "github.com/kelpie/kelpie/scheduler/console/client"
	"github.com/kelpie/kelpie/scheduler/consoleapi"
)

// evolving makes a sequence of a job's views as a scheduler would publish
// them: figures moving, nodes reporting (some rows unchanged), nodes added
// and removed, the heatmap and charts moving on by 0–2 buckets with their
// last column still filling, actions and policies changing now and then.
func evolving(r *rand.Rand, steps int) []*consolepb.JobView {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	nodes := []string{"server-0", "worker-0", "worker-1", "worker-2"}
	width, start := 1, 0
	var heat = map[string][]float32{}
	var series = map[string][]float64{}
	var out []*consolepb.JobView
	var actions []*consolepb.Action
	for step := range steps {
		v := &consolepb.JobView{Name: "j", State: "running", Iteration: int64(step * 10), Throughput: r.Float64() * 1000,
			Loss: 2 / float64(step+1), SpecYaml: "name: j\n", Submitted: timestamppb.New(t0)}
		if r.IntN(5) == 0 {
			v.Loss = math.NaN()
		}
		if r.IntN(4) == 0 {
			nodes = append(nodes, fmt.Sprintf("worker-%d", 3+step))
		}
		if r.IntN(6) == 0 && len(nodes) > 2 {
			nodes = append(nodes[:1], nodes[2:]...)
		}
		if r.IntN(3) == 0 {
			actions = append(actions, &consolepb.Action{Id: fmt.Sprintf("a-%d", step), Kind: "ADJUST_BS", State: "proposed"})
		}
		if len(actions) > 0 && r.IntN(3) == 0 {
			a := proto.CloneOf(actions[0])
			a.State = "applied"
			actions = append([]*consolepb.Action{a}, actions[1:]...)
		}
		v.Actions = append([]*consolepb.Action(nil), actions...)
		v.Policies = []*consolepb.PolicyView{{Name: "antdt-nd", Mode: []string{"auto", "approve"}[step/5%2]}}
		move := r.IntN(3)
		start += move
		width = min(width+move, 6)
		v.Heatmap = &consolepb.Heatmap{BucketSeconds: 1, Start: timestamppb.New(t0.Add(time.Duration(start) * time.Second))}
		for _, n := range nodes {
			cells := heat[n]
			if len(cells) > move {
				cells = append([]float32(nil), cells[move:]...)
			} else {
				cells = nil
			}
			for len(cells) < width {
				cells = append(cells, 0)
			}
			cells = cells[:width]
			cells[width-1] = float32(r.IntN(4)) // the open bucket fills
			heat[n] = cells
			v.Heatmap.Rows = append(v.Heatmap.Rows, &consolepb.HeatmapRow{Node: n, Cells: cells})
			vals := series[n]
			if len(vals) > move {
				vals = append([]float64(nil), vals[move:]...)
			} else {
				vals = nil
			}
			for len(vals) < width {
				vals = append(vals, 0)
			}
			vals = vals[:width]
			vals[width-1] = r.Float64()
			series[n] = vals
			v.Charts = append(v.Charts, &consolepb.Series{Name: "bpt/" + n, Unit: "s", IntervalSeconds: 1, Values: vals})
			nv := &consolepb.NodeView{Name: n, Role: "worker", State: "running", Iteration: int64(step)}
			if r.IntN(2) == 0 {
				nv.BptShortS, nv.Ratio = r.Float64(), r.Float64()*3
			}
			v.Nodes = append(v.Nodes, nv)
		}
		out = append(out, v)
	}
	return out
}

func encode(t *testing.T, v *consolepb.JobView) string {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPatchRoundTrip: for evolving views under several windows, applying
// the patch of each step to the view held gives the view the client would
// have received whole — and steps where nothing changed make no patch.
func TestPatchRoundTrip(t *testing.T) {
	windows := []*consolepb.ViewWindow{
		nil,
		{Limit: 2},
		{Sort: consoleapi.SortRatio, Offset: 1, Limit: 3, HeatmapRows: 2, ChartSeries: 2},
		{Sort: consoleapi.SortName, Filter: "worker", HeatmapRows: 1, ChartSeries: 1},
	}
	for seed := range uint64(40) {
		for wi, w := range windows {
			r := rand.New(rand.NewPCG(seed, 7))
			views := evolving(r, 30)
			held := consoleapi.TrimView(views[0], w)
			for i, v := range views[1:] {
				cur := consoleapi.TrimView(v, w)
				p, changed := diffPatch(held, cur)
				got := consoleclient.ApplyPatch(held, p)
				if encode(t, got) != encode(t, cur) {
					t.Fatalf("seed %d window %d step %d: patched view differs\n got %v\nwant %v\npatch %v", seed, wi, i+1, got, cur, p)
				}
				if !changed && encode(t, held) != encode(t, cur) {
					t.Fatalf("seed %d window %d step %d: a change reported as none", seed, wi, i+1)
				}
				held = got
			}
			if _, changed := diffPatch(held, held); changed {
				t.Fatalf("seed %d window %d: a view differs from itself", seed, wi)
			}
		}
	}
}

// TestPatchIsSmall: a 1,000-node job whose nodes each report once a second,
// watched at 4 Hz through a 40-row window: a patch carries the rows that
// changed and one or two heatmap columns, a small part of the view.
func TestPatchIsSmall(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	mk := func(step int) *consolepb.JobView {
		v := &consolepb.JobView{Name: "big", State: "running", Iteration: int64(step),
			Heatmap: &consolepb.Heatmap{BucketSeconds: 1, Start: timestamppb.New(t0.Add(time.Duration(step/4) * time.Second))}}
		for i := range 1000 {
			name := fmt.Sprintf("worker-%d", i)
			report := (step + i) / 4 // a report every 4 steps, staggered
			cells := make([]float32, 60)
			vals := make([]float64, 60)
			for c := range cells {
				cells[c] = float32((c + step/4 + i) % 7)
				vals[c] = float64((c+step/4+i)%7) / 100
			}
			v.Heatmap.Rows = append(v.Heatmap.Rows, &consolepb.HeatmapRow{Node: name, Cells: cells})
			v.Charts = append(v.Charts, &consolepb.Series{Name: "bpt/" + name, Unit: "s", IntervalSeconds: 1, Values: vals})
			v.Nodes = append(v.Nodes, &consolepb.NodeView{Name: name, Role: "worker", Iteration: int64(report), BptShortS: float64(report%5) / 100,
				Sparkline: vals[30:]})
		}
		return v
	}
	w := &consolepb.ViewWindow{Limit: 40, HeatmapRows: 40, ChartSeries: 8}
	whole := proto.Size(mk(0))
	held := consoleapi.TrimView(mk(0), w)
	trimmed := proto.Size(held)
	var patched int
	for step := 1; step <= 40; step++ {
		cur := consoleapi.TrimView(mk(step), w)
		p, _ := diffPatch(held, cur)
		patched += proto.Size(p)
		held = consoleclient.ApplyPatch(held, p)
	}
	t.Logf("whole view %d B, windowed %d B, patches %d B per frame", whole, trimmed, patched/40)
	if patched/40 >= trimmed/2 || trimmed >= whole/10 {
		t.Errorf("whole %d B, windowed %d B, patch %d B per frame: want the window under a tenth and a patch under half of it",
			whole, trimmed, patched/40)
	}
}

// TestWindowedPatchedStream: the real client, subscribed with a window (and
// patches, as it always asks), receives each job as the scheduler's view
// trimmed to the window, frame after frame, though the wire carries only
// what changed; SetWindow moves the window.
func TestWindowedPatchedStream(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	views := evolving(r, 25)
	b := newFakeBackend(views[0])
	h := newHarness(t, b, Options{})
	w := &consolepb.ViewWindow{Sort: consoleapi.SortRatio, Limit: 3, HeatmapRows: 2, ChartSeries: 2}
	got := make(chan *consolepb.JobView, 100)
	var patches atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := consoleclient.Dial(ctx, h.ts.URL, "op-secret", consoleclient.WithSubscription([]string{"j"}, 500, 0),
		consoleclient.WithWindow(w), consoleclient.WithHandler(func(m any) {
			switch m := m.(type) {
			case consoleclient.SnapshotMsg:
				for _, v := range m.Snapshot.GetJobs() {
					got <- v
				}
			case consoleclient.DeltaMsg:
				patches.Add(int64(len(m.Delta.GetPatches())))
				for _, v := range m.Delta.GetJobs() {
					got <- v
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	next := func(want *consolepb.JobView) {
		t.Helper()
		for {
			select {
			case v := <-got:
				if encode(t, v) == encode(t, want) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no frame showed %v", want)
			}
		}
	}
	next(consoleapi.TrimView(views[0], w))
	for _, v := range views[1:] {
		b.setJob(v)
		next(consoleapi.TrimView(v, w))
	}
	w2 := &consolepb.ViewWindow{Sort: consoleapi.SortName, Offset: 1, Limit: 2}
	if err := c.SetWindow(ctx, w2); err != nil {
		t.Fatal(err)
	}
	next(consoleapi.TrimView(views[len(views)-1], w2))
	if patches.Load() == 0 {
		t.Error("the stream carried no patch")
	}
}
