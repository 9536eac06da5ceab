package policy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// The job spec's `policies:` keys are a contract: these tests parse them
// with the registry filled (core/spec's own tests cannot: core links no
// policy).

// TestExamplesParse: every shipped spec, policies included, parses as it
// did before the policies were declared in their own files.
func TestExamplesParse(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	more, _ := filepath.Glob("../../examples/*/*.yaml")
	files = append(files, more...)
	if len(files) < 10 {
		t.Fatalf("found %d examples", len(files))
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s, err := spec.ParseLimits(f, src, spec.Unlimited())
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if again, err := spec.ParseLimits(f, s.YAML(), spec.Unlimited()); err != nil || string(again.YAML()) != string(s.YAML()) {
			t.Errorf("%s: the canonical form does not round-trip: %v", f, err)
		}
	}
}

// TestSpecPolicyKeys: each builtin policy's keys decode to its declared
// parameters, typed, with the declared defaults for the rest.
func TestSpecPolicyKeys(t *testing.T) {
	s, err := spec.Parse("spec.yaml", []byte(`name: x
cluster: {workers: 4}
policies:
  antdt-nd: {mode: approve, lambda: 1.3, window_persistent: 30s}
  antdt-dd: {min_accumulation: 2, max_accumulation: 4, min_batch: 8, max_batch: 64}
  backup-workers: {mode: auto, drop: 2}
  adjust-lr: {mode: off}
  psld: {mode: auto, epsilon: 0.05, strawman: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	nd := s.Policies[policy.NameAntDTND]
	if nd.Mode != spec.ModeApprove || nd.Params.Float(policy.NDLambda) != 1.3 ||
		nd.Params.Duration(policy.NDWindowPersistent) != 30*time.Second || nd.Params.Duration(policy.NDWindowTransient) != 5*time.Second {
		t.Errorf("antdt-nd = %+v", nd)
	}
	dd := s.Policies[policy.NameAntDTDD].Params
	if dd.Int(policy.DDMinAccumulation) != 2 || dd.Int(policy.DDMaxAccumulation) != 4 || dd.Int(policy.DDMinBatch) != 8 || dd.Int(policy.DDMaxBatch) != 64 {
		t.Errorf("antdt-dd = %v", dd)
	}
	if bw := s.Policies[policy.NameBackupWorkers]; bw.Mode != spec.ModeAuto || bw.Params.Int(policy.BackupDrop) != 2 {
		t.Errorf("backup-workers = %+v", bw)
	}
	if lr := s.Policies[policy.NameAdjustLR]; lr.Mode != spec.ModeOff || lr.Params.Float(policy.LRMinScale) != 0 {
		t.Errorf("adjust-lr = %+v", lr)
	}
	ps := s.Policies[policy.NamePSLD].Params
	if ps.Float(policy.PSLDEpsilon) != 0.05 || !ps.Bool(policy.PSLDStrawman) || ps.Float(policy.PSLDScaleThreshold) != 0.5 {
		t.Errorf("psld = %v", ps)
	}
	want := `policies:
  antdt-nd: {mode: approve, lambda: 1.3, window_transient: 5s, window_persistent: 30s}
  antdt-dd: {mode: off, min_accumulation: 2, max_accumulation: 4, min_batch: 8, max_batch: 64}
  backup-workers: {mode: auto, drop: 2}
  adjust-lr: {mode: off, min_scale: 0}
  psld: {mode: auto, epsilon: 0.05, theta1_over_theta0: 1, scale_threshold: 0.5, variance_threshold: 1, strawman: true}
`
	if got := string(s.YAML()); !strings.Contains(got, want) {
		t.Errorf("YAML() =\n%s\nwant it to hold\n%s", got, want)
	}
}

// TestSpecPolicyErrors: a builtin policy's bad keys and values are errors
// at their key's line, with the bound and its source.
func TestSpecPolicyErrors(t *testing.T) {
	_, err := spec.Parse("spec.yaml", []byte(`name: x
cluster: {workers: 2}
policies:
  antdt-nd: {lambda: 1, window_transient: 10s, window_persistent: 5s}
  antdt-dd: {min_accumulation: 3, max_accumulation: 2}
  backup-workers: {mode: auto, drop: 2}
  psld: {epsilon: 2, theta1_over_theta0: -1, scale_threshold: 1.5, variance_threshold: -2, window: 3, strawman: 1}
  adjust-lr: {mode: auto, min_scale: 2}
  eps: {mode: auto}
`))
	if err == nil {
		t.Fatal("Parse accepted every bad policy key")
	}
	for _, want := range []string{
		"spec.yaml:4: policies.antdt-nd.lambda: must be > 1, not 1 (AntDT §VI-A 3",
		"spec.yaml:5: policies.antdt-dd.max_accumulation: must be at least min_accumulation (3), not 2 (AntDT §VI-B Eq. 4",
		"spec.yaml:6: policies.backup-workers.drop: must be less than the job's 2 workers, not 2",
		"spec.yaml:7: policies.psld.window: unknown key",
		"spec.yaml:7: policies.psld.strawman: want true or false, got 1",
		"spec.yaml:7: policies.psld.epsilon: must be in [0, 1], not 2 (PSLD §4.3",
		"spec.yaml:7: policies.psld.theta1_over_theta0: must be ≥ 0, not -1",
		"spec.yaml:7: policies.psld.scale_threshold: must be in [0, 1], not 1.5",
		"spec.yaml:7: policies.psld.variance_threshold: must be ≥ 0, not -2",
		"spec.yaml:8: policies.adjust-lr.min_scale: must be in (0, 1] (or 0 for the default), not 2",
		"spec.yaml:9: policies.eps: unknown key",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in\n%v", want, err)
		}
	}
	// The window rule is checked once both windows are in their bounds:
	// 10s and 5s are.
	if !strings.Contains(err.Error(), "spec.yaml:4: policies.antdt-nd.window_persistent: must be at least window_transient_s (10), not 5") {
		t.Errorf("the window rule is missing from\n%v", err)
	}
	_, err = spec.Parse("spec.yaml", []byte("name: x\ncluster: {exchange: ring}\npolicies: {psld: {mode: auto}}\n"))
	if err == nil || !strings.Contains(err.Error(), "spec.yaml:3: policies.psld.mode: psld balances parameter servers: needs exchange ps (exchange is ring)") {
		t.Errorf("psld on a ring: %v", err)
	}
}

// TestDesignExample: the example of docs/design.md parses (it has every
// section, policies included).
func TestDesignExample(t *testing.T) {
	src, err := os.ReadFile("../../core/spec/testdata/design-example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := spec.Parse("design-example.yaml", src)
	if err != nil {
		t.Fatalf("Parse(design example): %v", err)
	}
	if s.Name != "mnist-mlp" || s.Cluster.Servers != 2 || s.Cluster.Workers != 4 || s.Sync.Drop.WaitFor != 3 {
		t.Errorf("Parse(design example) = %+v; want mnist-mlp with 2 servers, 4 workers, wait_for 3", s)
	}
	if got, want := len(s.Stragglers), 5; got != want {
		t.Fatalf("len(stragglers) = %d; want %d", got, want)
	}
	if got := s.Stragglers[2]; got.Rate != 20<<20 || got.Node != "server-1" || got.Line != 31 {
		t.Errorf("stragglers[2] = %+v; want server-1 at 20MiB/s on line 31", got)
	}
	if got := s.Stragglers[4]; got.Period != 20*time.Second || got.On != 10*time.Second || got.Probability != 1 {
		t.Errorf("stragglers[4] = %+v; want period 20s, on 10s, probability 1", got)
	}
	if got := s.Script[0]; got.Action != spec.ActionAddServer || got.Node != "server-2" || got.Line != 37 {
		t.Errorf("script[0] = %+v; want add-server creating server-2 on line 37", got)
	}
	if got := s.Script[3].Sizes["worker-2"]; got != 32 {
		t.Errorf("script[3].sizes[worker-2] = %d; want 32", got)
	}
	if again, err := spec.Parse("again.yaml", s.YAML()); err != nil || string(again.YAML()) != string(s.YAML()) {
		t.Errorf("the canonical form does not round-trip: %v", err)
	}
}

// checkRoundTrip checks that s.YAML() parses back to s and is a fixed point.
