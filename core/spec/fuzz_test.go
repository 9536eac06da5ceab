package spec

import (
	"errors"
	"os"
	"reflect"
	"testing"
	"time"
)

// FuzzParse checks that Parse never panics, that every failure is a
// non-empty Errors naming the file, and that every accepted spec survives a
// YAML round trip unchanged.
func FuzzParse(f *testing.F) {
	design, err := os.ReadFile("testdata/design-example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(design)
	for _, seed := range []string{
		"name: x\n",
		"",
		"name: x\nmodel: {kind: sparse-lr}\ncluster: {workers: 3, batch_sizes: {worker-0: 1, worker-1: 1, worker-2: 254}}\n",
		"name: x\ncluster: {workers: 2, exchange: rat, topology: {worker-0: {rack: a.b, pod: p}}}\n",
		"name: x\nsync: &s {model: pssp, pssp: {alpha: 0.5, dynamic: true}}\nscript:\n  - {at: 1s, action: set-sync, <<: *s, staleness: 0}\n",
		"name: x\ncluster: {workers: 2}\nscript:\n  - {at: 1s, action: add-worker}\n  - {at: 2s, action: remove-worker, node: worker-0}\n  - {at: 3s, action: adjust-batch, sizes: {worker-1: 200, worker-2: 56}}\n",
		"name: x\nstragglers:\n  - {node: server-0, kind: bandwidth, rate: 1.5e+06, start: 1m, end: 1h, period: 10s, on: 1s, follows_restart: true}\n",
		"name: 0x1f\ntrain: {optimizer: momentum, momentum: 0, lr: 1e-07}\n",
		"name: x\ncluster: {workers: 0}\nsync: {modle: bsp}\n",
		"name: [x\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		s, err := Parse("fuzz.yaml", src)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("Parse error %T %q is not a non-empty Errors", err, err)
			}
			for _, e := range es {
				if e.File != "fuzz.yaml" || e.Msg == "" || e.Line < 0 {
					t.Fatalf("malformed error %+v", e)
				}
			}
			return
		}
		checkRoundTrip(t, s)
	})
}

// FuzzYAML builds specs from arbitrary field values, so that the encoder
// meets floats, durations, rates and strings that hand-written YAML rarely
// holds, and checks that every one Parse accepts comes back equal.
func FuzzYAML(f *testing.F) {
	f.Add("mnist-mlp", "r0", 0.1, float64(20<<20), int64(200e6), 0.8, uint8(4), uint16(256), int64(1))
	f.Add("123", "1e5", 1e-7, 1.5e6, int64(1), 0.0, uint8(1), uint16(1), int64(-1))
	f.Add("null", "True", 1e300, 0.5, int64(90e9), 1.0, uint8(0), uint16(0), int64(0))
	f.Fuzz(func(t *testing.T, name, rack string, lr, rate float64, sleep int64, intensity float64, workers uint8, global uint16, seed int64) {
		s, err := Parse("base.yaml", []byte("name: x\n"))
		if err != nil {
			t.Fatal(err)
		}
		s.Name = name
		s.Train.LR = lr
		s.Train.GlobalBatch = int(global)
		s.Data.Seed = seed
		s.Cluster.Workers = int(workers)
		s.Sync.Drop.WaitFor = max(int(workers)-1, 1)
		s.Cluster.Topology = map[string]Labels{"worker-0": {Rack: rack}}
		s.Stragglers = []Straggler{
			{Node: "worker-0", Kind: StragglerCompute, Sleep: time.Duration(sleep), Intensity: intensity, Probability: 1},
			{Node: "server-0", Kind: StragglerBandwidth, Rate: rate, Start: time.Duration(sleep)},
		}
		out := s.YAML()
		back, err := Parse("fuzz.yaml", out)
		if err != nil {
			return // some field is out of range; Parse said which
		}
		if a, b := withoutLines(s), withoutLines(back); !reflect.DeepEqual(a, b) {
			t.Fatalf("Parse(YAML()) =\n%+v\nwant\n%+v\nYAML:\n%s", b, a, out)
		}
	})
}
