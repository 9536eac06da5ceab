package policytest

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/policydecl"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/scheduler/monitor"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// TestToyListed: registering the toy (toy_test.go) lists it after the
// builtin policies, in the scheduler's registry and in the spec's.
func TestToyListed(t *testing.T) {
	names := policy.Names()
	if names[len(names)-1] != "toy-restart" || !slices.Contains(names, policy.NameAntDTND) {
		t.Errorf("policy.Names() = %v; want the builtin ones, then toy-restart", names)
	}
	d, ok := policydecl.Lookup("toy-restart")
	if !ok || len(d.Params) != 2 || d.Params[1].Key() != "cooldown_s" {
		t.Errorf("the spec's declaration of toy-restart = %+v, %v", d, ok)
	}
	if got := policy.BoundsText("toy-restart"); got != "factor > 1, cooldown_s ≥ 0 seconds" {
		t.Errorf("BoundsText = %q", got)
	}
}

// TestToySpec: the job spec decodes the toy's keys, types and defaults
// them, refuses a value out of its bound at its line, and writes them back.
func TestToySpec(t *testing.T) {
	s, err := spec.Parse("spec.yaml", []byte("name: x\npolicies:\n  toy-restart: {mode: approve, factor: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := s.Policies["toy-restart"]
	if got.Mode != spec.ModeApprove || got.Params.Float(toyFactor) != 3 || got.Params.Duration(toyCooldown) != 30*time.Second {
		t.Errorf("toy-restart = %+v; want approve, factor 3, cooldown 30s", got)
	}
	if y := string(s.YAML()); !strings.Contains(y, "  toy-restart: {mode: approve, factor: 3, cooldown: 30s}\n") {
		t.Errorf("YAML() =\n%s", y)
	}
	for src, want := range map[string]string{
		"name: x\npolicies:\n  toy-restart:\n    factor: 0.5\n":  "spec.yaml:4: policies.toy-restart.factor: must be > 1, not 0.5 (toy §1",
		"name: x\npolicies:\n  toy-restart: {cooldown: 3}\n":     "spec.yaml:3: policies.toy-restart.cooldown: want a duration",
		"name: x\npolicies:\n  toy-restart: {speed: 3}\n":        `spec.yaml:3: policies.toy-restart.speed: unknown key`,
		"name: x\npolicies:\n  toy-restart: {mode: sometimes}\n": `spec.yaml:3: policies.toy-restart.mode: must be one of auto, approve, off`,
	} {
		if _, err := spec.Parse("spec.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v; want %q", src, err, want)
		}
	}
	if err := policy.CheckParams("toy-restart", map[string]float64{"factor": 1}, 4); err == nil || !strings.Contains(err.Error(), "toy-restart factor must be > 1") {
		t.Errorf("a live edit of factor to 1: %v", err)
	}
}

// TestToyProposes: the registry hands the toy its parameters and it
// proposes.
func TestToyProposes(t *testing.T) {
	p, ok := policy.Lookup("toy-restart")
	if !ok {
		t.Fatal("toy-restart is not registered")
	}
	snap := monitor.Snapshot{MeanBPT: 100 * time.Millisecond, Workers: []monitor.WorkerStat{
		{Node: "worker-0", BPTTrans: 90 * time.Millisecond}, {Node: "worker-1", BPTTrans: 250 * time.Millisecond}}}
	acts := p.Propose(policy.Snapshot{Monitor: snap, Params: p.Decl().Defaults()}, rand.New(rand.NewPCG(1, 2)))
	if len(acts) != 1 || acts[0].Target != "worker-1" || acts[0].Kind != policy.KindKillRestart {
		t.Errorf("Propose at factor 2 = %+v; want a KILL_RESTART of worker-1", acts)
	}
	if acts := p.Propose(policy.Snapshot{Monitor: snap, Params: policydecl.Values{"factor": 3}}, nil); len(acts) != 0 {
		t.Errorf("Propose at factor 3 = %+v; want none", acts)
	}
}
