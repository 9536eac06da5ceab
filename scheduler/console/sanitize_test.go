package console

import (
	"strings"
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
)

func TestClean(t *testing.T) {
	for _, tt := range []struct {
		in   string
		max  int
		want string
	}{
		{"mnist", 256, "mnist"},
		{"\x1b]0;pwned\x07job", 256, "]0;pwnedjob"},
		{"\x1b[2K\rOPERATOR olga APPROVED\x1b[0m", 256, "[2KOPERATOR olga APPROVED[0m"},
		{"a\u009bb\u007fc\x00d", 256, "abcd"},
		{"evil\u202egnp.exe", 256, "evilgnp.exe"},
		{"line\nbreak\ttab", 256, "linebreaktab"},
		{"bad\xffutf8", 256, "badutf8"},
		{"abcdefghij", 8, "abcde…"},
		{"ééééé", 7, "éé…"}, // cut on a rune boundary
		{"abc", 2, "ab"},    // no room for the mark
		{strings.Repeat("x", 300), 0, strings.Repeat("x", 300)},
	} {
		if got := Clean(tt.in, tt.max); got != tt.want {
			t.Errorf("Clean(%q, %d) = %q; want %q", tt.in, tt.max, got, tt.want)
		}
		if got := Clean(tt.in, tt.max); tt.max > 0 && len(got) > tt.max {
			t.Errorf("Clean(%q, %d) is %d bytes", tt.in, tt.max, len(got))
		}
	}
}

// TestCleanFrame: every string of a frame is cleaned — nested, in lists and
// map keys — with its own bound, and a spec keeps its lines.
func TestCleanFrame(t *testing.T) {
	f := &consolepb.ClientFrame{Id: "x\x1b", Body: &consolepb.ClientFrame_Command{Command: &consolepb.Command{
		Kind: &consolepb.Command_SetPolicy{SetPolicy: &consolepb.SetPolicy{Job: "j\x1b[1m", Policy: strings.Repeat("p", 1000),
			Params: map[string]float64{"lambda\x07": 1.5, "ok": 2}}}}}}
	cleanFrame(f)
	sp := f.GetCommand().GetSetPolicy()
	if f.GetId() != "x" || sp.GetJob() != "j[1m" || len(sp.GetPolicy()) > MaxNameBytes {
		t.Errorf("cleaned frame: id %q job %q policy %d bytes", f.GetId(), sp.GetJob(), len(sp.GetPolicy()))
	}
	if len(sp.GetParams()) != 2 || sp.GetParams()["lambda"] != 1.5 || sp.GetParams()["ok"] != 2 {
		t.Errorf("cleaned params %v; want lambda:1.5 ok:2", sp.GetParams())
	}
	d := &consolepb.ClientFrame{Body: &consolepb.ClientFrame_Command{Command: &consolepb.Command{
		Kind: &consolepb.Command_Approve{Approve: &consolepb.DecideAction{Job: "j", ActionId: "a", Reason: strings.Repeat("r", 1<<20)}}}}}
	cleanFrame(d)
	if n := len(d.GetCommand().GetApprove().GetReason()); n > MaxReasonBytes || n < MaxReasonBytes-8 {
		t.Errorf("a 1 MB reason cleaned to %d bytes; want about %d", n, MaxReasonBytes)
	}
	spec := "name: x\n\tdata: {kind: mnist}\x1b\n"
	s := &consolepb.ClientFrame{Body: &consolepb.ClientFrame_Command{Command: &consolepb.Command{
		Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: spec}}}}}
	cleanFrame(s)
	if got := s.GetCommand().GetSubmitJob().GetSpecYaml(); got != "name: x\n\tdata: {kind: mnist}\n" {
		t.Errorf("cleaned spec %q", got)
	}
}

func TestPrefix(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"127.0.0.1:80", "loopback"},
		{"127.45.3.2", "loopback"},
		{"[::1]:7080", "loopback"},
		{"10.1.2.3:5", "10.1.2.0/24"},
		{"[::ffff:10.1.2.3]:5", "10.1.2.0/24"},
		{"[2001:db8:1:2:3:4:5:6]:9", "2001:db8:1:2::/64"},
		{"not-an-address", "not-an-address"},
	} {
		if got := Prefix(tt.in); got != tt.want {
			t.Errorf("Prefix(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}
