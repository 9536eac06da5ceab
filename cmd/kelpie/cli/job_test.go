package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJobSubmitErrors: bad specs exit 2 with an error naming the submitted
// file, the key and the line, whether found here or by the scheduler; a
// spec larger than the scheduler reads reports the close reason.
func TestJobSubmitErrors(t *testing.T) {
	d, dir := testScheduler(t)
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tt := range []struct {
		file, src string
		want      []string
	}{
		{"bad.yaml", "name: bad\ncluster: {workerz: 1}\n", []string{"bad.yaml:2: cluster.workerz: unknown key"}},
		{"huge.yaml", "name: huge\ncluster: {workers: 100000}\ntrain: {global_batch: 200000}\n",
			[]string{"huge.yaml:2: cluster.workers: must be at most 1024", "--spec-limit workers"}},
		// An error found here as well: the scheduler's bound joins it.
		{"both.yaml", "name: both\ncluster: {workers: 100000}\ntrain: {global_batch: 64}\n",
			[]string{"both.yaml:2: cluster.workers: must be at most 1024 (got 100000); the limit is the scheduler's --spec-limit workers\n",
				"both.yaml:3: train.global_batch: must be at least cluster.workers (100000) (got 64)"}},
		{"mid.yaml", "name: mid\n#" + strings.Repeat("x", 1100000) + "\n", []string{"mid.yaml: spec too large (limit 1048576 bytes"}},
		{"big.yaml", "name: big\n#" + strings.Repeat("x", 3000000) + "\n", []string{"big.yaml: spec too large: 3000012 bytes", "read limited at"}},
	} {
		p := write(tt.file, tt.src)
		code, stderr := runCaptured(t, "job", "submit", "--scheduler", d.HTTPAddr(), "--token", "optok", p)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2; stderr %s", tt.file, code, stderr)
		}
		for _, w := range tt.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q lacks %q", tt.file, stderr, w)
			}
		}
	}
}

// TestRunSpecErrors: `kelpie run` refuses a spec beyond the bounds before
// it starts anything: exit 2, the file, line and key, and the limit to
// raise.
func TestRunSpecErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ file, src, want string }{
		{"workers.yaml", "name: w\ncluster: {workers: 100000, servers: 50000}\ntrain: {global_batch: 200000}\n", "workers.yaml:2: cluster.workers: must be at most 1024"},
		{"hidden.yaml", "name: h\nmodel: {kind: mlp, hidden: [4000000000]}\n", "hidden.yaml:2: model.hidden[0]: must be at most 65536"},
		{"blocks.yaml", "name: b\ncluster: {block_bytes: 1}\n", "blocks.yaml:2: cluster.block_bytes: must be at least 1024"},
		{"samples.yaml", "name: s\nmodel: {kind: sparse-lr}\ndata: {samples: 9000000000000, batches_per_shard: 100000}\n", "samples.yaml:3: data.samples: must be at most"},
	} {
		p := filepath.Join(dir, tt.file)
		if err := os.WriteFile(p, []byte(tt.src), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stderr := runCaptured(t, "run", p, "--json")
		if code != 2 || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "--spec-limit") {
			t.Errorf("kelpie run %s: exit %d, stderr %q; want 2 and %q with the limit to raise", tt.file, code, stderr, tt.want)
		}
	}
}
