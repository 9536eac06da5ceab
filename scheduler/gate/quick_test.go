package gate

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestRandomEvents drives the gate with random event sequences and checks
// what must hold whatever happens: a settled action never changes again,
// an action is dispatched at most once and only once approved, every
// transition is recorded as an effect in order, and at most one action per
// key is pending.
func TestRandomEvents(t *testing.T) {
	nodes := []string{"worker-0", "worker-1", "worker-2"}
	keys := []string{"k1", "k2", ""}
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		g := New(Config{ProposalTTL: 5 * time.Minute, AckTTL: 2 * time.Minute})
		now := epoch
		recorded := map[string][]State{}
		dispatched := map[string]int{}
		next := 0
		id := func() string {
			if next == 0 || r.IntN(3) == 0 {
				return fmt.Sprintf("a-%d", r.IntN(next+1))
			}
			return fmt.Sprintf("a-%d", r.IntN(next))
		}
		for range 60 {
			now = now.Add(time.Duration(r.IntN(90)) * time.Second)
			switch r.IntN(8) {
			case 0:
				next++
				_ = g.Propose(now, Proposal{ID: fmt.Sprintf("a-%d", next-1), Key: keys[r.IntN(len(keys))], Policy: "p", Kind: "K",
					Mode: []Mode{ModeAuto, ModeApprove, ModeOff}[r.IntN(3)], Cooldown: time.Minute})
			case 1:
				next++
				_ = g.Trigger(now, fmt.Sprintf("a-%d", next-1), "K", "", "op")
			case 2:
				_ = g.Decide(now, id(), r.IntN(2) == 0, "op", "")
			case 3:
				_, _ = g.Ack(now, id(), nodes[r.IntN(len(nodes))], int64(r.IntN(100)), []string{"", "", "boom"}[r.IntN(3)])
			case 4:
				g.Tick(now)
			case 5:
				g.NodeLost(now, nodes[r.IntN(len(nodes))], "gone")
			case 6:
				_ = g.Finish(now, id(), "s", 0, "done", nil)
			case 7:
				_ = g.Fail(now, id(), "s", "no")
			}
			for _, e := range g.Ready() {
				a := e.Action
				switch e.Type {
				case Dispatch:
					dispatched[a.ID]++
					if dispatched[a.ID] > 1 {
						t.Fatalf("seed %d: %s dispatched twice", seed, a.ID)
					}
					if s := recorded[a.ID]; len(s) == 0 || s[len(s)-1] != Approved {
						t.Fatalf("seed %d: %s dispatched after %v", seed, a.ID, s)
					}
					// The harness's part: await every node, then report it.
					if err := g.Await(now, a.ID, nodes); err != nil {
						t.Fatalf("seed %d: await %s: %v", seed, a.ID, err)
					}
					if err := g.Dispatched(now, a.ID, "s", ""); err != nil {
						t.Fatalf("seed %d: dispatched %s: %v", seed, a.ID, err)
					}
					for _, e := range g.Ready() {
						recorded[e.Action.ID] = append(recorded[e.Action.ID], e.Transition.State)
					}
				case Record:
					s := recorded[a.ID]
					if len(s) > 0 && !s[len(s)-1].Pending() {
						t.Fatalf("seed %d: %s changed after it settled: %v then %s", seed, a.ID, s, e.Transition.State)
					}
					recorded[a.ID] = append(s, e.Transition.State)
				}
			}
			pending := map[string]string{}
			for _, a := range g.Actions() {
				if len(a.History) != len(recorded[a.ID]) {
					t.Fatalf("seed %d: %s has %d transitions, %d recorded", seed, a.ID, len(a.History), len(recorded[a.ID]))
				}
				if a.State.Pending() && a.Policy != "operator" && a.Key != "" {
					if other, dup := pending[a.Key]; dup {
						t.Fatalf("seed %d: %s and %s both pending with key %s", seed, other, a.ID, a.Key)
					}
					pending[a.Key] = a.ID
				}
			}
		}
	}
}
