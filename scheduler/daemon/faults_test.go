package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// divergeSpec trains with a learning rate no model survives.
const divergeSpec = `
name: blowup
model: {kind: mlp, hidden: [64]}
data: {kind: mnist, epochs: 1, seed: 1}
train: {global_batch: 64, lr: 1e30}
cluster: {servers: 1, workers: 2}
`

// killTagged ends every process started with tag (tests tag theirs).
func killTagged(tag string) {
	for _, pid := range tagged(tag) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// TestDivergedRun: `kelpie run --json` of a job that diverges prints one
// valid JSON object (final_loss and accuracy null, a diverged object with
// the node and iteration) and exits 1 with a one-line message.
func TestDivergedRun(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	tag := fmt.Sprintf("KELPIE_TEST_TAG=diverge-run-%d", time.Now().UnixNano())
	defer killTagged(tag)
	spec := filepath.Join(t.TempDir(), "blowup.yaml")
	if err := os.WriteFile(spec, []byte(divergeSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kelpieBin, "run", spec, "--json", "--quiet")
	cmd.Env = append(os.Environ(), tag)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("kelpie run exited %v; want exit code 1\nstderr:\n%s", err, stderr.String())
	}
	var res map[string]any
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	if dec.More() {
		t.Fatalf("stdout has more than one JSON value")
	}
	for _, k := range []string{"final_loss", "accuracy"} {
		v, ok := res[k]
		if !ok || v != nil {
			t.Errorf("%s = %v (present %v); want null", k, v, ok)
		}
	}
	d, ok := res["diverged"].(map[string]any)
	if !ok {
		t.Fatalf("no diverged object in %v", res)
	}
	node, _ := d["node"].(string)
	if !strings.HasPrefix(node, "worker-") && !strings.HasPrefix(node, "server-") {
		t.Errorf("diverged.node = %q; want a node of the job", node)
	}
	if it, ok := d["iteration"].(float64); !ok || it < 0 {
		t.Errorf("diverged.iteration = %v; want an iteration", d["iteration"])
	}
	if w, _ := d["what"].(string); w != "loss" && w != "parameters" {
		t.Errorf("diverged.what = %q", w)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "kelpie: job blowup diverged: non-finite ") || !strings.Contains(last, node) {
		t.Errorf("last line of stderr = %q; want the one-line divergence", last)
	}
	t.Logf("diverged: %v; %s", d, last)
}

// TestDivergedConsole: on a scheduler, a diverging job ends in state
// diverged on the console stream (with the node and iteration) and in
// `kelpie job describe`; its loss is not a number, never 0.
func TestDivergedConsole(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	tag := fmt.Sprintf("KELPIE_TEST_TAG=diverge-console-%d", time.Now().UnixNano())
	defer killTagged(tag)
	dir := t.TempDir()
	tokens := writeTokens(t)
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	sched := exec.Command(kelpieBin, "scheduler", "--grpc", grpcAddr, "--http", httpAddr, "--data-dir", dir, "--tokens", tokens)
	sched.Env = append(os.Environ(), tag)
	sched.Stderr = logWriter{t}
	if err := sched.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = sched.Process.Signal(syscall.SIGTERM)
		_ = sched.Wait()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
	c, err := client.Dial(ctx, httpAddr, "op-token", client.WithSubscription([]string{"blowup"}, 10, 10),
		client.WithHandler(w.handle), client.WithBackoff(100*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: divergeSpec}}}); err != nil || !r.Ok {
		t.Fatalf("submit: %v %v", r, err)
	}
	_ = c.Subscribe(ctx, []string{"blowup"})
	final := w.until(t, "the job's end", 2*time.Minute, func(j *consolepb.JobView) bool {
		return j.State != "running" && j.State != "starting" && j.State != ""
	})
	if final.State != "diverged" {
		t.Fatalf("job ended %s (%s); want diverged", final.State, final.Error)
	}
	d := final.GetDiverged()
	if d == nil || d.Node == "" || d.What == "" || d.Value == "" {
		t.Fatalf("console view diverged = %v; want where and what", d)
	}
	if final.Loss == final.Loss { // not NaN
		t.Errorf("console loss = %v; want NaN for a diverged job", final.Loss)
	}
	if !strings.Contains(final.Error, d.Node) {
		t.Errorf("console error %q does not name %s", final.Error, d.Node)
	}
	out, err := exec.CommandContext(ctx, kelpieBin, "job", "describe", "blowup", "--scheduler", httpAddr, "--token", "view-token").CombinedOutput()
	if err != nil {
		t.Fatalf("describe: %v\n%s", err, out)
	}
	want := fmt.Sprintf("diverged: non-finite %s (%s) at %s, iteration %d", d.What, d.Value, d.Node, d.Iteration)
	if !strings.Contains(string(out), "Job blowup: diverged") || !strings.Contains(string(out), want) ||
		!strings.Contains(string(out), "loss NaN") {
		t.Errorf("describe says:\n%s\nwant state diverged, %q and loss NaN", out, want)
	}
}

// TestMissingDataFailsFast: a job whose data set is missing or truncated
// fails at submit with what is wrong and how to fix it; no node is
// launched (no crash loop).
func TestMissingDataFailsFast(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	spec := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(spec, []byte(strings.ReplaceAll(restartSpec, "name: survivor", "name: nodata")), 0o644); err != nil {
		t.Fatal(err)
	}
	truncated := t.TempDir()
	// A train-images file cut short.
	if err := os.WriteFile(filepath.Join(truncated, "train-images-idx3-ubyte"), []byte{0, 0, 8, 3, 0, 0, 0xea, 0x60, 0, 0, 0, 28, 0, 0, 0, 28, 1, 2, 3}, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, dir string
		want      []string
	}{
		{"missing", filepath.Join(t.TempDir(), "nothing-here"), []string{"MNIST not found at ", "run `make data`"}},
		{"truncated", truncated, []string{"is damaged", "train-images-idx3-ubyte", "truncated", "run `make data`"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tag := fmt.Sprintf("KELPIE_TEST_TAG=nodata-%d", time.Now().UnixNano())
			defer killTagged(tag)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, kelpieBin, "run", spec, "--json")
			cmd.Env = append(os.Environ(), tag, "KELPIE_MNIST_DIR="+c.dir)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("kelpie run = %v; want a failure\n%s", err, stderr.String())
			}
			for _, w := range c.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), "agent of") || strings.Contains(stderr.String(), "running, pid") {
				t.Errorf("nodes were launched for a job without data:\n%s", stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q; want nothing", stdout.String())
			}
		})
	}
}
