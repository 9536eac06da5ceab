package console

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
)

func TestParseTokens(t *testing.T) {
	tests := []struct {
		name, text string
		want       Tokens
		err        string // substring of the error; "" for none
	}{
		{"empty", "", Tokens{}, ""},
		{"comments and blanks", "# who may do what\n\n  # indented comment\nt1 operator olga\n\tt2   viewer  alice \n",
			Tokens{"t1": {"olga", RoleOperator}, "t2": {"alice", RoleViewer}}, ""},
		{"too few fields", "t1 operator olga\nt2 viewer\n", nil, "tokens.txt:2: want TOKEN ROLE NAME, got 2 fields"},
		{"too many fields", "t1 operator olga smith\n", nil, "tokens.txt:1: want TOKEN ROLE NAME, got 4 fields"},
		{"unknown role", "\n# x\nt1 admin root\n", nil, `tokens.txt:3: unknown role "admin"`},
		{"role is case sensitive", "t1 Operator olga\n", nil, `tokens.txt:1: unknown role "Operator"`},
		{"duplicate token", "t1 operator olga\nt1 viewer alice\n", nil, "tokens.txt:2: token of alice repeats the token of olga"},
	}
	for _, tt := range tests {
		got, err := parseTokens(strings.NewReader(tt.text), "tokens.txt")
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: parseTokens(%q) error = %v; want one containing %q", tt.name, tt.text, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: parseTokens(%q) = %v, %v; want %v", tt.name, tt.text, got, err, tt.want)
		}
	}
}

func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tokens")
	if err := os.WriteFile(good, []byte("abc operator olga\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadTokens(good)
	if want := (Tokens{"abc": {"olga", RoleOperator}}); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("LoadTokens(%s) = %v, %v; want %v", good, got, err, want)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("abc operator olga\nxyz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(bad); err == nil || !strings.Contains(err.Error(), bad+":2:") {
		t.Errorf("LoadTokens(%s) error = %v; want it to name %s:2", bad, err, bad)
	}
	if _, err := LoadTokens(filepath.Join(dir, "missing")); err == nil {
		t.Errorf("LoadTokens(missing) = nil error; want one")
	}
}

func TestLookupAndBearer(t *testing.T) {
	for _, tt := range []struct {
		header, token string
	}{
		{"Bearer op-secret", "op-secret"},
		{"bearer   op-secret ", "op-secret"},
		{"Basic b3A6c2VjcmV0", ""},
		{"op-secret", ""},
		{"", ""},
	} {
		if got := bearer(tt.header); got != tt.token {
			t.Errorf("bearer(%q) = %q; want %q", tt.header, got, tt.token)
		}
	}
	for _, tt := range []struct {
		token string
		want  Principal
		ok    bool
	}{
		{"op-secret", Principal{"olga", RoleOperator}, true},
		{"viewer-secret", Principal{"alice", RoleViewer}, true},
		{"op-secre", Principal{}, false},
		{"", Principal{}, false},
	} {
		if got, ok := testTokens.lookup(tt.token); got != tt.want || ok != tt.ok {
			t.Errorf("lookup(%q) = %v, %v; want %v, %v", tt.token, got, ok, tt.want, tt.ok)
		}
	}
	if f := fingerprint("op-secret"); strings.Contains(f, "secret") || !strings.HasPrefix(f, "sha256:") {
		t.Errorf("fingerprint(op-secret) = %q; want a sha256 prefix that hides the token", f)
	}
}

func TestDiffViews(t *testing.T) {
	a1, b1, c1 := job("a", 1), job("b", 1), job("c", 1)
	a1copy := proto.Clone(a1).(*consolepb.JobView)
	a2 := job("a", 2)
	names := func(vs []*consolepb.JobView) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.GetName())
		}
		return out
	}
	_, _, last := diffViews(nil, []*consolepb.JobView{a1, b1})
	nan1 := &consolepb.JobView{Name: "n", Loss: math.NaN()}
	nan2 := proto.Clone(nan1).(*consolepb.JobView)
	_, _, lastNaN := diffViews(nil, []*consolepb.JobView{nan1})
	tests := []struct {
		name    string
		last    map[string]held
		cur     []*consolepb.JobView
		changed []string
		removed []string
	}{
		{"first view: everything is new", nil, []*consolepb.JobView{a1, b1}, []string{"a", "b"}, nil},
		{"same pointers", last, []*consolepb.JobView{a1, b1}, nil, nil},
		{"equal copy is no change", last, []*consolepb.JobView{a1copy, b1}, nil, nil},
		{"one job changed", last, []*consolepb.JobView{a2, b1}, []string{"a"}, nil},
		{"job added", last, []*consolepb.JobView{a1, b1, c1}, []string{"c"}, nil},
		{"job removed", last, []*consolepb.JobView{b1}, nil, []string{"a"}},
		{"all removed", last, nil, nil, []string{"a", "b"}},
		{"duplicates and nils are ignored", nil, []*consolepb.JobView{a1, nil, a2}, []string{"a"}, nil},
		{"a NaN figure that stays NaN is no change", lastNaN, []*consolepb.JobView{nan2}, nil, nil},
		{"NaN to a number is a change", lastNaN, []*consolepb.JobView{{Name: "n", Loss: 0.5}}, []string{"n"}, nil},
	}
	for _, tt := range tests {
		changed, removed, next := diffViews(tt.last, tt.cur)
		if got := names(changed); !reflect.DeepEqual(got, tt.changed) || !reflect.DeepEqual(removed, tt.removed) {
			t.Errorf("%s: diffViews(%v) = %v, %v; want %v, %v", tt.name, names(tt.cur), got, removed, tt.changed, tt.removed)
		}
		for _, v := range tt.cur {
			if v != nil && next[v.GetName()].view == nil {
				t.Errorf("%s: next lacks %s", tt.name, v.GetName())
			}
		}
	}
}

func TestRates(t *testing.T) {
	for _, tt := range []struct{ asked, limit, want float64 }{
		{0, 20, 4},
		{-1, 20, 4},
		{math.NaN(), 20, 4},
		{10, 20, 10},
		{100, 20, 20},
		{0, 2, 2},
	} {
		if got := rateHz(tt.asked, tt.limit); got != tt.want {
			t.Errorf("rateHz(%v, %v) = %v; want %v", tt.asked, tt.limit, got, tt.want)
		}
	}
	if got := period(4); got != 250*time.Millisecond {
		t.Errorf("period(4) = %v; want 250ms", got)
	}
	for _, tt := range []struct {
		asked int32
		want  int
	}{{0, 60}, {-3, 60}, {30, 30}, {5000, MaxHeatmapColumns}} {
		if got := heatmapColumns(tt.asked); got != tt.want {
			t.Errorf("heatmapColumns(%d) = %d; want %d", tt.asked, got, tt.want)
		}
	}
}

func TestFilterEvents(t *testing.T) {
	evs := []*consolepb.Event{{Job: "a", Message: "1"}, {Job: "b", Message: "2"}, {Message: "3"}, {Job: "a", Message: "4"}}
	msgs := func(es []*consolepb.Event) string {
		var s []string
		for _, e := range es {
			s = append(s, e.GetMessage())
		}
		return strings.Join(s, ",")
	}
	for _, tt := range []struct {
		jobs []string
		want string
	}{{nil, "1,2,3,4"}, {[]string{"a"}, "1,3,4"}, {[]string{"c"}, "3"}} {
		if got := msgs(filterEvents(evs, newJobSet(tt.jobs))); got != tt.want {
			t.Errorf("filterEvents(%v) = %s; want %s", tt.jobs, got, tt.want)
		}
	}
	if got := msgs(newestFirst(evs)); got != "4,3,2,1" {
		t.Errorf("newestFirst = %s; want 4,3,2,1", got)
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		cmd        *consolepb.Command
		kind, verb string
		job        string
		err        string
	}{
		{nil, "unknown", "", "", "command has no kind"},
		{&consolepb.Command{}, "unknown", "", "", "command has no kind"},
		{&consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: "name: j\n"}}},
			"submit_job", "submit jobs", "", ""},
		{&consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{}}},
			"submit_job", "submit jobs", "", "submit_job: missing spec_yaml"},
		{&consolepb.Command{Kind: &consolepb.Command_KillJob{KillJob: &consolepb.KillJob{Job: "j"}}}, "kill_job", "kill jobs", "j", ""},
		{approve("j", "a-1"), "approve", "approve actions", "j", ""},
		{approve("", ""), "approve", "approve actions", "", "approve: missing job, action_id"},
		{&consolepb.Command{Kind: &consolepb.Command_Reject{Reject: &consolepb.DecideAction{Job: "j", ActionId: "a-1", Reason: "no"}}},
			"reject", "reject actions", "j", ""},
		{&consolepb.Command{Kind: &consolepb.Command_Trigger{Trigger: &consolepb.TriggerAction{Job: "j",
			Action: &consolepb.Action{Kind: "KILL_RESTART", Target: "worker-1"}}}}, "trigger", "trigger actions", "j", ""},
		{&consolepb.Command{Kind: &consolepb.Command_Trigger{Trigger: &consolepb.TriggerAction{Job: "j"}}},
			"trigger", "trigger actions", "j", "trigger: missing action.kind"},
		{&consolepb.Command{Kind: &consolepb.Command_SetPolicy{SetPolicy: &consolepb.SetPolicy{Job: "j", Policy: "antdt-nd",
			Mode: "auto", Params: map[string]float64{"lambda": 1.5}}}}, "set_policy", "set policies", "j", ""},
		{&consolepb.Command{Kind: &consolepb.Command_History{History: &consolepb.GetHistory{Job: "j", Limit: 10}}}, "history", "", "j", ""},
		{&consolepb.Command{Kind: &consolepb.Command_History{History: &consolepb.GetHistory{}}}, "history", "", "", "history: missing job"},
		{&consolepb.Command{Kind: &consolepb.Command_History{History: &consolepb.GetHistory{Job: "j", From: -1}}}, "history", "", "j", "must not be negative"},
	}
	for _, tt := range tests {
		d, err := describe(tt.cmd)
		if d.kind != tt.kind || d.verb != tt.verb || d.job != tt.job {
			t.Errorf("describe(%v) = %+v; want kind %s verb %q job %q", tt.cmd, d, tt.kind, tt.verb, tt.job)
		}
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("describe(%v) error = %v; want none", tt.cmd, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || Code(err) != codes.InvalidArgument):
			t.Errorf("describe(%v) error = %v (%v); want InvalidArgument containing %q", tt.cmd, err, Code(err), tt.err)
		}
	}
	d, _ := describe(&consolepb.Command{Kind: &consolepb.Command_SetPolicy{SetPolicy: &consolepb.SetPolicy{Job: "j",
		Policy: "psld", Params: map[string]float64{"z": 1, "epsilon": 0.1}}}})
	if want := "policy=psld mode= params={epsilon:0.1 z:1}"; d.detail != want {
		t.Errorf("set_policy detail = %q; want %q", d.detail, want)
	}
}
