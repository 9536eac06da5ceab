package spec

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem with a spec: where it is and what is wrong.
type Error struct {
	File string // the name given to Parse
	Line int    // 1-based; 0 when the problem has no place in the file
	Path string // key path such as cluster.workers or stragglers[2].kind; empty for syntax errors
	Msg  string
}

// Error formats e as "file:line: path: msg".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem Parse found, sorted by line. Parse returns it as
// its error; use errors.As to reach the individual errors.
type Errors []*Error

// Error lists the errors one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

func (es Errors) sort() {
	sort.SliceStable(es, func(i, j int) bool { return es[i].Line < es[j].Line })
}
