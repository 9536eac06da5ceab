package probe

import "testing"

// job builds a probe's answers: servers s0, s1 and workers w0..w2 with a
// kernel of 10 ms and round trips of 1 ms (the server's own share 0.1 ms),
// then lets change adjust them.
func job(change func(map[string]*Node)) []Node {
	ns := map[string]*Node{}
	order := []string{"server-0", "server-1", "worker-0", "worker-1", "worker-2"}
	for _, n := range order {
		role := "worker"
		if n[:6] == "server" {
			role = "server"
		}
		ns[n] = &Node{Name: n, Role: role, KernelS: 0.010}
		if role == "worker" {
			ns[n].Trips = []Trip{{Server: "server-0", RTT: 0.001, Own: 0.0001}, {Server: "server-1", RTT: 0.001, Own: 0.0001}}
		}
	}
	if change != nil {
		change(ns)
	}
	out := make([]Node, 0, len(order))
	for _, n := range order {
		out = append(out, *ns[n])
	}
	return out
}

func TestJudge(t *testing.T) {
	cases := []struct {
		name, target            string
		change                  func(map[string]*Node)
		verdict, subject, cause string
	}{
		{"even", "worker-1", nil, VerdictNone, "", ""},
		{"slow kernel", "worker-1", func(ns map[string]*Node) { ns["worker-1"].KernelS = 0.05 }, VerdictNode, "worker-1", "compute"},
		{"another's kernel", "worker-0", func(ns map[string]*Node) { ns["worker-1"].KernelS = 0.05 }, VerdictNone, "", ""},
		{"slow link", "worker-2", func(ns map[string]*Node) {
			for i := range ns["worker-2"].Trips {
				ns["worker-2"].Trips[i].RTT = 0.008
			}
		}, VerdictLink, "worker-2", "link"},
		{"server's link", "worker-0", func(ns map[string]*Node) {
			for _, w := range []string{"worker-0", "worker-1", "worker-2"} {
				ns[w].Trips[1].RTT = 0.02
			}
		}, VerdictServer, "server-1", "link"},
		{"server's handling", "server-1", func(ns map[string]*Node) {
			for _, w := range []string{"worker-0", "worker-1", "worker-2"} {
				ns[w].Trips[1].RTT, ns[w].Trips[1].Own = 0.02, 0.018
			}
		}, VerdictServer, "server-1", "server"},
		{"probing the other server", "server-0", func(ns map[string]*Node) {
			for _, w := range []string{"worker-0", "worker-1", "worker-2"} {
				ns[w].Trips[1].RTT = 0.02
			}
		}, VerdictNone, "", ""},
		{"one worker slow to one server", "worker-0", func(ns map[string]*Node) { ns["worker-1"].Trips[1].RTT = 0.02 }, VerdictNone, "", ""},
		{"no answer", "worker-1", func(ns map[string]*Node) { ns["worker-1"].KernelS, ns["worker-1"].Err = 0, "stopped" }, VerdictUnknown, "", ""},
	}
	for _, c := range cases {
		r := Judge(c.target, job(c.change))
		if r.Verdict != c.verdict || r.Subject != c.subject || r.Cause != c.cause {
			t.Errorf("%s: %s %q %q (%s); want %s %q %q", c.name, r.Verdict, r.Subject, r.Cause, r.Detail, c.verdict, c.subject, c.cause)
		}
		if r.Detail == "" {
			t.Errorf("%s: no detail", c.name)
		}
	}
}

// TestJudgeAlone: a node with no other node to compare with is unknown.
func TestJudgeAlone(t *testing.T) {
	r := Judge("worker-0", []Node{{Name: "worker-0", Role: "worker", KernelS: 0.01}})
	if r.Verdict != VerdictUnknown {
		t.Errorf("alone: %s (%s); want unknown", r.Verdict, r.Detail)
	}
	if r := Judge("worker-9", job(nil)); r.Verdict != VerdictUnknown {
		t.Errorf("not in the job: %s; want unknown", r.Verdict)
	}
}
