package spec

import (
	"errors"
	"os"
	"testing"
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
