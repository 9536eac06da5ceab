package textclean

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClean(t *testing.T) {
	for _, tt := range []struct {
		in   string
		max  int
		want string
	}{
		{"worker-2", MaxNameBytes, "worker-2"},
		{"\x1b]0;pwned\x07worker-2\r\n\u202e\x9b2J", MaxNameBytes, "]0;pwnedworker-22J"},
		{"bad\xffutf8", 0, "badutf8"},
		{strings.Repeat("é", 10), 9, "ééé…"},
		{"abcdef", 3, "abc"},
	} {
		got := Clean(tt.in, tt.max)
		if got != tt.want || (tt.max > 0 && len(got) > tt.max) || !utf8.ValidString(got) {
			t.Errorf("Clean(%q, %d) = %q; want %q", tt.in, tt.max, got, tt.want)
		}
	}
	if got := Lines("a:\n\tb: 1\r\n\x1b[2K", 0); got != "a:\n\tb: 1\r\n[2K" {
		t.Errorf("Lines kept %q", got)
	}
}
