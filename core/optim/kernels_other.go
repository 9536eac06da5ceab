//go:build !amd64

package optim

// No vector kernels on this architecture: the Go loops of kernels.go run.
const vector = false

func sgdVec(p, g []float32, lr float32) bool             { panic("optim: no vector kernels") }
func sgdToVec(dst, p, g []float32, lr float32) bool      { panic("optim: no vector kernels") }
func sgdKeepVec(p, g []float32, lr float32) bool         { panic("optim: no vector kernels") }
func momentumVec(v, p, g []float32, mu, lr float32) bool { panic("optim: no vector kernels") }
func accumulateVec(dst, x []float32)                     { panic("optim: no vector kernels") }
