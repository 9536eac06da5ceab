package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/manager"
	"github.com/kelpie/kelpie/scheduler/policy"
)

const epsJob = `
name: NAME
model: {kind: KIND}
data: {kind: mnist, epochs: EPOCHS, seed: 1}
train: {global_batch: 64, lr: 0.05, optimizer: momentum, momentum: 0.9}
cluster: {workers: WORKERS, servers: SERVERS, min_workers: WORKERS, max_workers: WORKERS, max_servers: SERVERS, block_bytes: 32768}
`

func epsSpecText(name, kind string, epochs, workers, servers int) string {
	return strings.NewReplacer("NAME", name, "KIND", kind, "EPOCHS", fmt.Sprint(epochs),
		"WORKERS", fmt.Sprint(workers), "SERVERS", fmt.Sprint(servers)).Replace(epsJob)
}

// TestEPSAdmission runs real jobs on a scheduler with 4 worker and 3 server
// slots. A job past its early feedback gives a server up (REMOVE_SERVER,
// policy eps) so that an incoming job fits; a third job, for which nothing
// can be given up (every job at its minimum workers or in early feedback),
// is queued and starts when a job ends. The slots in use never exceed the
// capacity, every job completes, and no process is left behind. No job
// grows past the size it asked for (max_workers, max_servers): whether
// long grows into idle slots before incoming arrives would depend on how
// fast it reaches its early feedback, and growth is the EPS planner's
// scenarios' to show (scheduler/eps/testdata/grow_backoff.txt).
func TestEPSAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("three MNIST jobs")
	}
	c := policy.Capacity{Workers: 4, Servers: 3}
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Exe: kelpieBin,
		NodeLog: logWriter{t}, Tick: 200 * time.Millisecond, Capacity: c})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	m := d.Manager
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Sample the slots in use all along. Each job's view is served for up
	// to manager.ViewTTL once built, so one sample can pair a job's view
	// from before its end with another's from after it grew into the
	// freed slots: only a sum over capacity that lasts longer than two
	// view lifetimes is an over-commit (a job launched into slots still
	// held runs for seconds).
	var over []string
	var mu sync.Mutex
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		var since time.Time // when the sum first went over capacity; zero: it is within
		for {
			var w, s int32
			var jobs []string
			for _, v := range m.View(nil, 0) {
				if v.State == manager.StateStarting || v.State == manager.StateRunning {
					w, s = w+v.Workers, s+v.Servers
					jobs = append(jobs, fmt.Sprintf("%s %dw%ds", v.Name, v.Workers, v.Servers))
				}
			}
			switch {
			case int(w) <= c.Workers && int(s) <= c.Servers:
				since = time.Time{}
			case since.IsZero():
				since = time.Now()
			case time.Since(since) > 2*manager.ViewTTL:
				mu.Lock()
				over = append(over, strings.Join(jobs, ", "))
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	view := func(name string) *consolepb.JobView {
		for _, v := range m.View([]string{name}, 0) {
			return v
		}
		return nil
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}

	if _, err := m.Submit(epsSpecText("long", "mlp", 3, 2, 2), "test"); err != nil {
		t.Fatal(err)
	}
	until("long past its early feedback", func() bool {
		v := view("long")
		return v.State == manager.StateRunning && v.Iteration >= 150
	})
	// 2 servers asked, 1 free: long gives one up.
	if _, err := m.Submit(epsSpecText("incoming", "mlp", 1, 2, 2), "test"); err != nil {
		t.Fatal(err)
	}
	if v := view("incoming"); v.State != manager.StateQueued {
		t.Errorf("incoming is %s right after it came; want queued while long shrinks", v.State)
	}
	until("incoming launched", func() bool { return view("incoming").State != manager.StateQueued })
	// Every slot is taken and nothing can be given up: third queues.
	if _, err := m.Submit(epsSpecText("third", "softmax", 1, 1, 1), "test"); err != nil {
		t.Fatal(err)
	}
	if v := view("third"); v.State != manager.StateQueued {
		t.Errorf("third is %s; want queued in a full cluster", v.State)
	}
	results := map[string]*manager.Result{}
	for _, name := range []string{"long", "incoming", "third"} {
		r, err := m.Wait(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		results[name] = r
	}
	close(stop)
	sampler.Wait()
	for _, o := range over {
		t.Errorf("slots in use beyond the capacity (%+v): %s", c, o)
	}

	// long's REMOVE_SERVER came from EPS, with the policy's reason, and was
	// applied before incoming launched. (Its first: once incoming runs, long
	// may grow into slots that free up and give the growth back, a later
	// REMOVE_SERVER with EPS's back-off reason.)
	var removed *manager.ActionResult
	for i, a := range results["long"].Actions {
		if a.Kind == "REMOVE_SERVER" && a.Policy == policy.NameEPS {
			removed = &results["long"].Actions[i]
			break
		}
	}
	if removed == nil || removed.State != "applied" || !strings.Contains(removed.Reason, "gives 1 server to incoming job incoming") {
		t.Fatalf("long's actions %+v; want an applied REMOVE_SERVER by eps giving a server to incoming", results["long"].Actions)
	}
	events, _ := m.EventsSince(0, 0)
	at := map[string]int{}
	for i, e := range events {
		t.Logf("%s %s %s %s", e.Job, e.Kind, e.Who, e.Message)
		switch {
		case e.Kind == "eps" && strings.HasPrefix(e.Message, "launch:"):
			at["launch "+e.Job] = i
		case e.Kind == "eps" && strings.HasPrefix(e.Message, "eps admit:"):
			at["admit "+e.Job] = i
		case e.Kind == "action" && strings.Contains(e.Message, "REMOVE_SERVER") && strings.Contains(e.Message, "applied"):
			if _, seen := at["removed"]; !seen {
				at["removed"] = i // the first: the one that made room for incoming
			}
		case e.Kind == "job" && strings.Contains(e.Message, " completed") && at["first end"] == 0:
			at["first end"] = i
		}
	}
	for _, k := range []string{"admit incoming", "removed", "launch incoming", "launch third", "first end"} {
		if _, ok := at[k]; !ok {
			t.Fatalf("no %q event", k)
		}
	}
	if !(at["admit incoming"] < at["removed"] && at["removed"] < at["launch incoming"]) {
		t.Errorf("events out of order: admit %d, server removed %d, incoming launched %d", at["admit incoming"], at["removed"], at["launch incoming"])
	}
	if at["launch third"] < at["first end"] {
		t.Errorf("third launched (event %d) before any job ended (event %d)", at["launch third"], at["first end"])
	}
	for name, r := range results {
		if r.ShardsDone != r.ShardsTotal || r.Accuracy < 0.85 {
			t.Errorf("%s: shards %d/%d, accuracy %.4f", name, r.ShardsDone, r.ShardsTotal, r.Accuracy)
		}
		t.Logf("%s: JCT %.1fs (arrival to end), accuracy %.4f", name, r.JCTSeconds, r.Accuracy)
	}
	var procs []int
	for _, name := range []string{"long", "incoming", "third"} {
		for _, p := range m.Procs(name) {
			procs = append(procs, p.Pid())
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range procs {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("pid %d still runs after its job", pid)
		}
	}
}
