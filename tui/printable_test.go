package tui

import "testing"

func TestPrintable(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"refused bob (viewer): approve", "refused bob (viewer): approve"},
		{"\x1b]0;pwned\x07job", "]0;pwnedjob"},
		{"a\rOPERATOR olga APPROVED\u009b2J", "aOPERATOR olga APPROVED2J"},
		{"evil\u202egnp", "evilgnp"},
		{"héllo ✓", "héllo ✓"},
	} {
		if got := printable(tt.in); got != tt.want {
			t.Errorf("printable(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}
