// Package examples ships kelpie's example job specs inside the binary, so
// `kelpie demo` needs no files beside it.
package examples

import "embed"

// Specs holds every example spec, by file name (experiments/ holds the
// papers' experiments).
//
//go:embed *.yaml experiments/*.yaml
var Specs embed.FS

// Demo is the spec of `kelpie demo`.
func Demo() []byte {
	b, err := Specs.ReadFile("straggler-demo.yaml")
	if err != nil {
		panic("examples: straggler-demo.yaml is not embedded: " + err.Error())
	}
	return b
}
