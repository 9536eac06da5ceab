package spec

import (
	"fmt"

	"github.com/goccy/go-yaml/ast"
)

// Parse reads a job spec: it decodes src, fills in defaults and validates the
// result under DefaultLimits. name (usually the file name) prefixes every
// error. On failure the error is an Errors listing every problem found,
// sorted by line.
func Parse(name string, src []byte) (*Spec, error) {
	return ParseLimits(name, src, DefaultLimits())
}

// ParseLimits is Parse with the given bounds on the spec's sizes.
func ParseLimits(name string, src []byte, lim Limits) (*Spec, error) {
	if int64(len(src)) > lim.SpecBytes {
		return nil, Errors{{File: name, Msg: fmt.Sprintf("spec too large (limit %d bytes, got %d); %s",
			lim.SpecBytes, len(src), limitHint("spec_bytes"))}}
	}
	d := &decoder{file: name, lines: map[string]int{}, bad: map[string]bool{}, anchors: map[string]ast.Node{}}
	body, ok := d.parse(src)
	if !ok {
		return nil, d.errs
	}
	s := &Spec{}
	d.decode(body, s)
	d.applyDefaults(s)
	(&checker{d: d, s: s, lim: lim}).validate()
	if len(d.errs) > 0 {
		d.errs.sort()
		return nil, d.errs
	}
	return s, nil
}
