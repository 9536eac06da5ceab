package torch

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/runtime/data"
)

// needTorch skips a test when the child's python3 has no torch (the
// Makefile's torch step installs it for `make test`).
func needTorch(t *testing.T) {
	t.Helper()
	if err := pythonHasTorch(); err != nil {
		t.Skip(err)
	}
}

func pythonHasTorch() error {
	if err := exec.Command(Python(), "-c", "import torch, numpy").Run(); err != nil {
		return fmt.Errorf("%s cannot import torch and numpy (%v): install Debian's python3-torch and python3-numpy (make torch)", Python(), err)
	}
	return nil
}

func tiny(t *testing.T) string { return tinyPath(t) }

func tinyPath(t testing.TB) string {
	p, err := filepath.Abs("testdata/tiny.py")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func torchSpec(t *testing.T) *spec.Spec {
	s, err := spec.Parse("tiny.yaml", []byte("name: tiny\nmodel: {kind: torch, script: testdata/tiny.py}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestComplete(t *testing.T) {
	needTorch(t)
	s := torchSpec(t)
	if err := Complete(s, ".", os.Stderr); err != nil {
		t.Fatal(err)
	}
	if s.Model.Script != tiny(t) || s.Data.Samples != 600 || s.Data.TestSamples != 200 {
		t.Fatalf("script %q samples %d/%d", s.Model.Script, s.Data.Samples, s.Data.TestSamples)
	}
	want := []spec.Tensor{{Name: "0.weight", Rows: 8, Cols: 2}, {Name: "0.bias", Rows: 1, Cols: 8},
		{Name: "2.weight", Rows: 3, Cols: 8}, {Name: "2.bias", Rows: 1, Cols: 3}}
	if len(s.Model.Tensors) != len(want) {
		t.Fatalf("tensors %+v, want %+v", s.Model.Tensors, want)
	}
	for i := range want {
		if s.Model.Tensors[i] != want[i] {
			t.Fatalf("tensor %d is %+v, want %+v", i, s.Model.Tensors[i], want[i])
		}
	}
	// The spec that travels to the scheduler parses back with them.
	again, err := spec.Parse("again.yaml", s.YAML())
	if err != nil || len(again.Model.Tensors) != 4 {
		t.Fatalf("completed spec: %v, %+v", err, again)
	}
}

// batch fills a batch of the training set's samples [from, from+n).
func batch(b *data.Batch, from, n int) {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = from + i
	}
	Set{Name: "train", N: 600}.Fill(b, idx)
}

// TestTrainDense trains the tiny dense model by plain SGD in Go over the
// shared parameters: the child computes on what Go wrote, and Go reads the
// gradients the child wrote.
func TestTrainDense(t *testing.T) {
	needTorch(t)
	m, err := New(Config{Script: tiny(t), Seed: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, g := m.Shared()
	init := m.InitDense(1)
	for i, d := range init {
		copy(p.Dense[i], d)
	}
	var b data.Batch
	first := math.NaN()
	var last float64
	for step := range 60 {
		batch(&b, (step*20)%600, 20)
		last = m.Grad(p, &b, g, 1)
		if step == 0 {
			first = last
		}
		for i := range p.Dense {
			for j := range p.Dense[i] {
				p.Dense[i][j] -= 0.2 * g.Dense[i][j]
			}
		}
	}
	if !(last < first/2) {
		t.Fatalf("loss went from %.4f to %.4f: the child does not compute on the shared parameters", first, last)
	}
	idx := make([]int, 200)
	for i := range idx {
		idx[i] = i
	}
	Set{Name: "test", N: 200}.Fill(&b, idx)
	_, acc := m.Evaluate(p, &b)
	if acc < 0.9 {
		t.Fatalf("test accuracy %.3f after training", acc)
	}
	// Parameters outside the shared memory are copied in: the same loss.
	q := m.NewParams()
	for i := range p.Dense {
		copy(q.Dense[i], p.Dense[i])
	}
	batch(&b, 0, 20)
	gq := m.NewParams()
	lq := m.Grad(q, &b, gq, 1)
	lp := m.Grad(p, &b, g, 1)
	if lq != lp || !equal(gq.Dense[0], g.Dense[0]) {
		t.Fatalf("copied parameters give loss %v, shared %v", lq, lp)
	}
	if tm := m.Timing(); tm.Steps != 62 || tm.Python <= 0 {
		t.Fatalf("timing %+v", tm)
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTrainSparse trains the EmbeddingBag model with the rows kept in a Go
// map, as servers keep them: only the rows a batch touches are pulled and
// pushed.
func TestTrainSparse(t *testing.T) {
	needTorch(t)
	t.Setenv("TINY_SPARSE", "1")
	m, err := New(Config{Script: tiny(t), Seed: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.sparseT != 0 || m.tensors[0].Rows != 1<<24 || m.tensors[0].Cols != 4 {
		t.Fatalf("tensors %+v", m.tensors)
	}
	p, g := m.Shared()
	init := m.InitDense(1)
	for i, d := range init {
		if d != nil {
			copy(p.Dense[i], d)
		}
	}
	table := map[uint64][]float32{}
	pull := func(keys []uint64) {
		p.Sparse.Keys = append(p.Sparse.Keys[:0], keys...)
		p.Sparse.Vals = p.Sparse.Vals[:0]
		for _, k := range keys {
			r := table[k]
			if r == nil {
				r = make([]float32, 4)
				table[k] = r
			}
			p.Sparse.Vals = append(p.Sparse.Vals, r...)
		}
	}
	var b data.Batch
	var first, last float64
	for step := range 60 {
		batch(&b, (step*20)%600, 20)
		keys := m.SparseKeys(&b, nil)
		if len(keys) == 0 || len(keys) > 9 {
			t.Fatalf("step %d: %d keys (the tiny set has 9 ids)", step, len(keys))
		}
		pull(keys)
		last = m.Grad(p, &b, g, 1)
		if step == 0 {
			first = last
		}
		if !equal64(g.Sparse.Keys, keys) || len(g.Sparse.Vals) != 4*len(keys) {
			t.Fatalf("gradient rows for %v: keys %v, %d values", keys, g.Sparse.Keys, len(g.Sparse.Vals))
		}
		for i, k := range g.Sparse.Keys {
			for j := range 4 {
				table[k][j] -= 0.5 * g.Sparse.Vals[4*i+j]
			}
		}
		for i := range p.Dense {
			for j := range p.Dense[i] {
				p.Dense[i][j] -= 0.5 * g.Dense[i][j]
			}
		}
	}
	if !(last < first/2) {
		t.Fatalf("loss went from %.4f to %.4f", first, last)
	}
	if len(table) != 9 {
		t.Fatalf("%d rows touched, want the 9 ids of the data", len(table))
	}
}

func equal64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestErrors: a missing torch names the Debian package; a broken script
// names the script, the function and the traceback's line; no child is
// left running.
func TestErrors(t *testing.T) {
	needTorch(t)
	fake := t.TempDir()
	os.WriteFile(filepath.Join(fake, "torch.py"), []byte("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"), 0o644)
	noModel := filepath.Join(t.TempDir(), "nomodel.py")
	os.WriteFile(noModel, []byte("def train_set():\n    return []\n\ndef test_set():\n    return []\n"), 0o644)
	badSyntax := filepath.Join(t.TempDir(), "syntax.py")
	os.WriteFile(badSyntax, []byte("import torch\n\ndef model(:\n    pass\n"), 0o644)
	for _, tc := range []struct {
		name, script string
		env          []string
		want         []string
	}{
		{"missing torch", tiny(t), []string{"PYTHONPATH=" + fake}, []string{"no Python module torch", "python3-torch"}},
		{"no model()", noModel, nil, []string{noModel, "defines no function model()"}},
		{"syntax error", badSyntax, nil, []string{badSyntax + ":3: syntax error"}},
		{"bad train_set()", tiny(t), []string{"TINY_BROKEN=train_set"}, []string{"tiny.py", "train_set() failed", "IndexError", "tiny.py:56: return [1, 2, 3][7]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, e := range tc.env {
				k, v, _ := strings.Cut(e, "=")
				t.Setenv(k, v)
			}
			var out bytes.Buffer
			s := torchSpec(t)
			s.Model.Script = tc.script
			done := make(chan error, 1)
			go func() { done <- Complete(s, ".", &out) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(60 * time.Second): // a hang guard, not a timing assertion
				t.Fatal("no answer within 60 s")
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestNonFiniteReply(t *testing.T) {
	for _, tc := range []struct {
		line string
		want float64
	}{{`{"loss": NaN, "n": 2}`, math.NaN()}, {`{"loss": -Infinity}`, math.Inf(-1)}, {`{"loss": 0.5}`, 0.5}} {
		c := &child{out: bufio.NewReader(strings.NewReader(tc.line + "\n"))}
		var r reply
		if err := c.read(&r); err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		if got := float64(r.Loss); !(got == tc.want || math.IsNaN(got) && math.IsNaN(tc.want)) {
			t.Errorf("%s: loss %v, want %v", tc.line, got, tc.want)
		}
	}
}

// TestHelperWorker is the worker process of TestChildDiesWithWorker, run by
// it; on its own it skips.
func TestHelperWorker(t *testing.T) {
	script := os.Getenv("KELPIE_TORCH_HELPER")
	if script == "" {
		t.Skip("the worker process of TestChildDiesWithWorker")
	}
	cfg := Config{Script: script, Seed: 1, Threads: 1}
	if os.Getenv("KELPIE_TORCH_HELPER_WARM") == "1" {
		cfg.Owner = os.Getpid() // this process owns the zygote too
	}
	m, err := New(cfg)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if cfg.Owner != 0 {
		fmt.Printf("zygote %d warm %t\n", zygoteOf(startOptions{Script: script, Seed: 1, Threads: 1, Owner: cfg.Owner}), m.Warm())
	}
	fmt.Printf("child %d\n", m.Pid())
	time.Sleep(time.Minute) // until killed
	os.Exit(1)
}

// startHelperWorker runs TestHelperWorker as a process of its own on the
// tiny script, with env added, and returns it and a scanner of its output.
func startHelperWorker(t *testing.T, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWorker$")
	cmd.Env = append(append(os.Environ(), "KELPIE_TORCH_HELPER="+tiny(t)), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewScanner(out)
}

// TestChildDiesWithWorker: kill -9 of the worker ends its Python child.
func TestChildDiesWithWorker(t *testing.T) {
	needTorch(t)
	cmd, sc := startHelperWorker(t)
	var pid int
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "child %d", &pid); err == nil {
			break
		}
		t.Log(sc.Text())
	}
	if pid == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the helper worker started no child")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second) // a hang guard
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the Python child (pid %d) outlived its worker's kill -9", pid)
	}
}

// alive says whether pid runs (a zombie waiting for its reaper does not).
func alive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(st), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}
