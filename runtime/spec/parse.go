package spec

import "github.com/goccy/go-yaml/ast"

// Parse reads a job spec: it decodes src, fills in defaults and validates the
// result. name (usually the file name) prefixes every error. On failure the
// error is an Errors listing every problem found, sorted by line.
func Parse(name string, src []byte) (*Spec, error) {
	d := &decoder{file: name, lines: map[string]int{}, bad: map[string]bool{}, anchors: map[string]ast.Node{}}
	body, ok := d.parse(src)
	if !ok {
		return nil, d.errs
	}
	s := &Spec{}
	d.decode(body, s)
	d.applyDefaults(s)
	(&checker{d: d, s: s}).validate()
	if len(d.errs) > 0 {
		d.errs.sort()
		return nil, d.errs
	}
	return s, nil
}
