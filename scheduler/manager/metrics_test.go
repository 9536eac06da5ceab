package manager

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/client_golang/prometheus"
)

// TestAlertRulesMatchMetrics keeps deploy/prometheus/kelpie-rules.yaml in
// step with the collector: every metric an alert reads is exported, and every
// label it selects or groups by is one of that metric's labels. promtool
// checks the rules' syntax and logic (make rules); only this test knows what
// /metrics really serves.
func TestAlertRulesMatchMetrics(t *testing.T) {
	labels := map[string]map[string]bool{}
	descs := make(chan *prometheus.Desc, 64)
	(&Manager{}).Collector().Describe(descs)
	close(descs)
	nameRE := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	varRE := regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	for d := range descs {
		s := d.String()
		name := nameRE.FindStringSubmatch(s)
		if name == nil {
			t.Fatalf("cannot read a metric name from %s", s)
		}
		set := map[string]bool{}
		if v := varRE.FindStringSubmatch(s); v != nil {
			for _, l := range strings.Split(v[1], ",") {
				set[strings.TrimSpace(l)] = true
			}
		}
		labels[name[1]] = set
	}
	if !labels["kelpie_nodes"][JobLabel] || labels["kelpie_nodes"]["job"] {
		t.Fatalf("kelpie_nodes labels = %v; want %s and no job", labels["kelpie_nodes"], JobLabel)
	}

	raw, err := os.ReadFile("../../deploy/prometheus/kelpie-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	selRE := regexp.MustCompile(`(kelpie_[a-z_]+)(\{([^}]*)\})?`)
	byRE := regexp.MustCompile(`by \(([^)]*)\)`)
	// A binary set operation's sides are checked apart, the labels it
	// matches on against both.
	setRE := regexp.MustCompile(`\s(?:unless|and|or)\s+(?:on \(([^)]*)\)\s*)?`)
	alerts := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			alerts++
			var on []string
			for _, o := range setRE.FindAllStringSubmatch(r.Expr, -1) {
				on = append(on, strings.Split(o[1], ",")...)
			}
			var sels int
			for _, part := range setRE.Split(r.Expr, -1) {
				grouped := append([]string(nil), on...)
				for _, b := range byRE.FindAllStringSubmatch(part, -1) {
					grouped = append(grouped, strings.Split(b[1], ",")...)
				}
				for _, m := range selRE.FindAllStringSubmatch(byRE.ReplaceAllString(part, ""), -1) {
					sels++
					have, ok := labels[m[1]]
					if !ok {
						t.Errorf("%s: metric %s is not exported", r.Alert, m[1])
						continue
					}
					var used []string
					for _, matcher := range strings.Split(m[3], ",") {
						if l, _, ok := strings.Cut(matcher, "="); ok {
							used = append(used, strings.TrimRight(strings.TrimSpace(l), "!~"))
						}
					}
					for _, l := range append(used, grouped...) {
						if l = strings.TrimSpace(l); l != "" && !have[l] {
							t.Errorf("%s: %s has no label %q (it has %v)", r.Alert, m[1], l, have)
						}
					}
				}
			}
			if sels == 0 {
				t.Errorf("%s: expression %q reads no kelpie metric", r.Alert, r.Expr)
			}
		}
	}
	if alerts < 4 {
		t.Fatalf("%d alerts in the rules file; want the four of the console issue", alerts)
	}
}

// scrape gathers the collector's series: name → their label sets.
func scrape(t *testing.T, m *Manager) map[string][]map[string]string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]map[string]string{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range mt.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[mf.GetName()] = append(out[mf.GetName()], l)
			if strings.HasSuffix(mf.GetName(), "_total") && mf.GetType().String() != "COUNTER" {
				t.Errorf("%s is a %s; a _total is a counter", mf.GetName(), mf.GetType())
			}
		}
	}
	return out
}

// TestMetricsOfAKilledJob: a running job exports its progress (iteration,
// samples, loss, throughput) and its nodes' live figures; once killed, the
// live figures go at the next scrape (as a completed job's do), and so no
// straggler alert outlives it.
func TestMetricsOfAKilledJob(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	m, j, report := historyJob(t, filepath.Join(t.TempDir(), "kelpie.db"), clk)
	slow := map[string]float64{"worker-0": 0.002, "worker-1": 0.002, "worker-2": 0.028, "worker-3": 0.002}
	for range 10 {
		report(slow)
	}
	j.invalidateViews()
	live := scrape(t, m)
	for _, name := range []string{"kelpie_job_iteration", "kelpie_job_samples_total", "kelpie_job_loss",
		"kelpie_job_throughput_samples_per_second", "kelpie_node_bpt_seconds", "kelpie_node_straggler"} {
		if len(live[name]) == 0 {
			t.Errorf("a running job has no %s", name)
		}
	}
	if err := m.Kill("hist", "test"); err != nil {
		t.Fatal(err)
	}
	gone := scrape(t, m)
	for _, name := range []string{"kelpie_node_bpt_seconds", "kelpie_node_straggler", "kelpie_node_throughput_samples_per_second",
		"kelpie_job_throughput_samples_per_second", "kelpie_action_pending_seconds", "kelpie_server_speed_bytes_per_second"} {
		if len(gone[name]) > 0 {
			t.Errorf("killed job still exports %s %v", name, gone[name])
		}
	}
	if len(gone["kelpie_job_samples_total"]) == 0 || len(gone["kelpie_job_iteration"]) == 0 {
		t.Error("a killed job's progress series went too")
	}
	if st := gone["kelpie_job_state"]; len(st) != 1 || st[0]["state"] != "killed" {
		t.Errorf("kelpie_job_state %v; want killed", st)
	}
}

// TestMetricsShareTheConsolesView: a scrape reads the detail view the
// console keeps published, of whatever width, rather than building one of
// its own; with none published it builds and publishes its own.
func TestMetricsShareTheConsolesView(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	m, j, report := historyJob(t, filepath.Join(t.TempDir(), "kelpie.db"), clk)
	report(map[string]float64{"worker-0": 0.002, "worker-1": 0.002, "worker-2": 0.002, "worker-3": 0.002})
	j.invalidateViews()
	console := m.View([]string{"hist"}, 30)[0]
	if got := m.metricsViews(); len(got) != 1 || got[0] != console {
		t.Errorf("with the console's view published, metricsViews built its own")
	}
	j.invalidateViews()
	own := m.metricsViews()
	if len(own) != 1 || own[0] == console || len(own[0].Nodes) == 0 {
		t.Fatalf("with no view published: %d views; want one of its own, with its nodes", len(own))
	}
	if again := m.metricsViews(); again[0] != own[0] {
		t.Error("a second scrape within the TTL built another view")
	}
}
