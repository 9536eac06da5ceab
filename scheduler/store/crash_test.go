package store

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/kelpie/kelpie/scheduler/shard"
)

// The crash test runs this test binary again as a child that writes to the
// store in a loop and prints "committed N" after each step's writes have
// returned; the parent kills it with SIGKILL mid-loop, reopens the file and
// checks that every step the child reported is there.
const (
	crashEnvPath  = "KELPIE_STORE_CRASH_PATH"
	crashEnvStart = "KELPIE_STORE_CRASH_START"
	crashJob      = "crash"
)

var crashShards = shard.Config{Samples: 100_000, Epochs: 1, GlobalBatch: 10, BatchesPerShard: 1, Seed: 7}

// crashChild is the child's loop. It never returns: it is killed, or it
// gives up after a while if its parent is gone.
func crashChild(path string, start int) {
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	s, err := Open(path)
	if err != nil {
		fail(err)
	}
	q, ok, err := s.LoadShards(crashJob)
	if err != nil {
		fail(err)
	}
	if !ok {
		if q, err = shard.New(crashShards); err != nil {
			fail(err)
		}
		if err := s.SaveShards(crashJob, q); err != nil {
			fail(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := start; time.Now().Before(deadline); i++ {
		name := fmt.Sprintf("job-%06d", i)
		if err := s.PutJob(JobRecord{Name: name, SpecYAML: strings.Repeat("x", i%512), State: "running"}); err != nil {
			fail(err)
		}
		if _, err := s.Audit(AuditEntry{Who: "child", What: name, Allowed: true}); err != nil {
			fail(err)
		}
		if err := s.PutAction(crashJob, ActionRecord{ID: "a", State: strconv.Itoa(i)}); err != nil {
			fail(err)
		}
		if sh, ok := q.Fetch("child", time.Duration(i)); ok {
			if err := q.Report("child", sh.ID, time.Duration(i)); err != nil {
				fail(err)
			}
		}
		if err := s.PutShardChanges(crashJob, q.Changes()); err != nil {
			fail(err)
		}
		fmt.Printf("committed %d\n", i)
	}
	os.Exit(3)
}

func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnvPath); path != "" {
		start, _ := strconv.Atoi(os.Getenv(crashEnvStart))
		crashChild(path, start)
	}
	os.Exit(m.Run())
}

// runChild starts a child at step start, lets it commit n steps, kills it
// with SIGKILL after delay (so kills land in different writes of a step)
// and returns the last step it reported committed.
func runChild(t *testing.T, path string, start, n int, delay time.Duration) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnvPath+"="+path, crashEnvStart+"="+strconv.Itoa(start))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	last := start - 1
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	timeout := time.After(15 * time.Second)
	killed := false
	for !killed {
		select {
		case line, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("child exited early after step %d: %v", last, cmd.ProcessState)
			}
			if v, found := strings.CutPrefix(line, "committed "); found {
				last, _ = strconv.Atoi(v)
			} else if strings.HasPrefix(line, "error:") {
				t.Errorf("child: %s", line)
			}
			if last >= start+n-1 {
				time.Sleep(delay)
				cmd.Process.Kill() // SIGKILL, while the child is writing
				killed = true
			}
		case <-timeout:
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child committed only up to step %d of %d in 15s", last, start+n-1)
		}
	}
	// Anything the child printed before it died counts as committed too.
	for line := range lines {
		if v, found := strings.CutPrefix(line, "committed "); found {
			last, _ = strconv.Atoi(v)
		}
	}
	cmd.Wait()
	if ws := cmd.ProcessState.String(); !strings.Contains(ws, "killed") {
		t.Fatalf("child ended with %q; want killed", ws)
	}
	return last
}

func TestSIGKILLLosesNothingCommitted(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	path := t.TempDir() + "/kelpie.db"
	next, extra := 0, 0
	delays := []time.Duration{0, 300 * time.Microsecond, time.Millisecond, 2500 * time.Microsecond, 6 * time.Millisecond}
	for round, delay := range delays {
		last := runChild(t, path, next, 10+7*round, delay)
		s, err := OpenWith(path, Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		err = s.backend.(*boltStore).db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: file check after SIGKILL: %v", round, err)
		}
		for i := 0; i <= last; i++ {
			name := fmt.Sprintf("job-%06d", i)
			if _, ok, err := s.GetJob(name); !ok || err != nil {
				t.Fatalf("round %d: committed %s missing after SIGKILL (%v)", round, name, err)
			}
		}
		audit, err := s.ListAudit(time.Time{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range audit {
			seen[e.What] = true
		}
		a, _, err := s.GetAction(crashJob, "a")
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]bool{}
		for _, ev := range a.History {
			states[ev.State] = true
		}
		for i := 0; i <= last; i++ {
			if name := fmt.Sprintf("job-%06d", i); !seen[name] {
				t.Fatalf("round %d: committed audit entry %s missing", round, name)
			}
			if !states[strconv.Itoa(i)] {
				t.Fatalf("round %d: committed action state %d missing from history", round, i)
			}
		}
		q, ok, err := s.LoadShards(crashJob)
		if !ok || err != nil {
			t.Fatalf("round %d: LoadShards after SIGKILL = %v, %v", round, ok, err)
		}
		// One shard per committed step; the step in flight when the child
		// died may have committed its shard too, and is then redone.
		_, doing, done := q.Counts()
		extra++
		if doing != 0 || done < last+1 || done > last+1+extra {
			t.Fatalf("round %d: %d DONE, %d DOING after %d committed steps; want %d..%d DONE, 0 DOING",
				round, done, doing, last+1, last+1, last+1+extra)
		}
		_, partial, _ := s.GetJob(fmt.Sprintf("job-%06d", last+1))
		must(t, s.Close())
		t.Logf("round %d: killed after step %d (next step's job written: %v); reopened with %d shards DONE",
			round, last, partial, done)
		next = last + 1
	}
}

// TestConcurrentUse runs writers and readers of every kind at once; run it
// with -race.
func TestConcurrentUse(t *testing.T) { eachImpl(t, testConcurrentUse) }

func testConcurrentUse(t *testing.T, im impl) {
	s, _ := im.open(t, Options{})
	q, _ := shard.New(shard.Config{Samples: 1000, Epochs: 1, GlobalBatch: 10, BatchesPerShard: 1})
	must(t, s.SaveShards("job", q))
	var qmu sync.Mutex // the queue is not: the scheduler serializes it
	const writers, steps = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*steps*12) // every send below fits: no goroutine blocks
	for w := range writers {
		wg.Go(func() {
			for i := range steps {
				id := fmt.Sprintf("w%d-%d", w, i)
				errs <- s.PutJob(JobRecord{Name: id, State: "running"})
				errs <- s.PutNode("job", NodeRecord{Name: id})
				errs <- s.PutAction("job", ActionRecord{ID: "shared", State: strconv.Itoa(w)})
				errs <- s.PutAction("job", ActionRecord{ID: id, State: "proposed"})
				_, err := s.Audit(AuditEntry{Who: id, What: "step"})
				errs <- err
				qmu.Lock()
				if sh, ok := q.Fetch(id, 1); ok {
					errs <- q.Report(id, sh.ID, 2)
				}
				changes := q.Changes()
				errs <- s.PutShardChanges("job", changes) // written under qmu so records stay in order
				qmu.Unlock()
			}
		})
		wg.Go(func() {
			for range steps {
				_, err := s.ListJobs()
				errs <- err
				_, err = s.ListActions("job")
				errs <- err
				_, err = s.LastAudit(5)
				errs <- err
				_, _, err = s.LoadShards("job")
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	jobs, _ := s.ListJobs()
	nodes, _ := s.ListNodes("job")
	actions, _ := s.ListActions("job")
	audit, _ := s.ListAudit(time.Time{}, 0)
	if len(jobs) != writers*steps || len(nodes) != writers*steps || len(actions) != writers*steps+1 || len(audit) != writers*steps {
		t.Errorf("after concurrent use: %d jobs, %d nodes, %d actions, %d audit entries; want %d, %d, %d, %d",
			len(jobs), len(nodes), len(actions), len(audit), writers*steps, writers*steps, writers*steps+1, writers*steps)
	}
	seqs := map[uint64]bool{}
	for _, e := range audit {
		seqs[e.Seq] = true
	}
	if len(seqs) != len(audit) {
		t.Errorf("audit sequences not unique: %d distinct of %d", len(seqs), len(audit))
	}
	got, _, err := s.LoadShards("job")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, done := got.Counts(); done != writers*steps {
		t.Errorf("loaded queue has %d DONE; want %d", done, writers*steps)
	}
}
