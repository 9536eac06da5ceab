package manager

import (
	"os"
	"regexp"
	"strings"
	"testing"

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
	alerts := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			alerts++
			var grouped []string
			for _, b := range byRE.FindAllStringSubmatch(r.Expr, -1) {
				grouped = append(grouped, strings.Split(b[1], ",")...)
			}
			sels := selRE.FindAllStringSubmatch(byRE.ReplaceAllString(r.Expr, ""), -1)
			if len(sels) == 0 {
				t.Errorf("%s: expression %q reads no kelpie metric", r.Alert, r.Expr)
			}
			for _, m := range sels {
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
	}
	if alerts < 4 {
		t.Fatalf("%d alerts in the rules file; want the four of the console issue", alerts)
	}
}
