// Package textclean bounds and cleans strings that come from outside the
// scheduler — a console client's frame, a node's report — before they are
// stored or shown: control characters (C0, DEL, C1) and Unicode
// bidirectional overrides are dropped, so that a name full of terminal
// escape sequences cannot change an operator's terminal or forge a line of
// the event list, and the length is cut to a bound. It imports nothing of
// the module, so the console, the manager, the coordinator and the daemon
// all use it.
package textclean

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds on strings from clients and nodes, in bytes.
const (
	// MaxNameBytes bounds names and identifiers: jobs, action ids, nodes,
	// policies, modes, parameter names, the client's name.
	MaxNameBytes = 256
	// MaxReasonBytes bounds free text: an approval's reason, a trigger's
	// reason.
	MaxReasonBytes = 1024
)

// truncMark ends a string that was cut to its bound.
const truncMark = "…"

// Clean returns s without control characters (C0, DEL, C1) and Unicode
// bidirectional overrides, cut to at most max bytes (on a rune boundary,
// ending in "…" when cut). Invalid UTF-8 is dropped. max ≤ 0 means no bound.
func Clean(s string, max int) string { return clean(s, max, false) }

// Lines is Clean keeping tabs and line breaks (a spec's YAML).
func Lines(s string, max int) string { return clean(s, max, true) }

func clean(s string, max int, keepLines bool) string {
	if isClean(s, keepLines) && (max <= 0 || len(s) <= max) {
		return s
	}
	var b strings.Builder
	limit := len(s)
	if max > 0 {
		limit = min(limit, max)
	}
	b.Grow(limit)
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				continue
			}
		}
		if !keep(r, keepLines) {
			continue
		}
		if max > 0 && b.Len()+utf8.RuneLen(r) > max {
			cut := b.String()
			if max <= len(truncMark) {
				return cut // no room for the mark
			}
			for len(cut)+len(truncMark) > max {
				_, n := utf8.DecodeLastRuneInString(cut)
				cut = cut[:len(cut)-n]
			}
			return cut + truncMark
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isClean(s string, keepLines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			// Multi-byte: decide rune by rune.
			for _, r := range s[i:] {
				if r == utf8.RuneError || !keep(r, keepLines) {
					return false
				}
			}
			return true
		}
		if !keep(rune(c), keepLines) {
			return false
		}
	}
	return true
}

// keep says whether r may stay in a cleaned string.
func keep(r rune, keepLines bool) bool {
	if keepLines && (r == '\n' || r == '\t' || r == '\r') {
		return true
	}
	if unicode.IsControl(r) {
		return false
	}
	switch {
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069, r == 0x200E, r == 0x200F, r == 0x061C:
		return false // bidirectional embeddings, overrides, isolates and marks
	}
	return true
}
