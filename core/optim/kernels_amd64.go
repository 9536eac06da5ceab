package optim

import "golang.org/x/sys/cpu"

// The vector kernels (kernels_amd64.s), used when the CPU has AVX2 and FMA.
// They take n a multiple of 32; the wrappers in kernels.go run a shorter
// tail through them in a padded buffer, so that every element of a block
// is computed the same way (fused multiply-adds) wherever it lies.

//go:noescape
func sgdToAVX2(dst, p, grad *float32, n int, lr float32) (finite bool)

//go:noescape
func sgdKeepAVX2(p, grad *float32, n int, lr float32) (finite bool)

//go:noescape
func momentumAVX2(v, p, grad *float32, n int, mu, lr float32) (finite bool)

//go:noescape
func accumulateAVX2(dst, x *float32, n int)

var vector = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// sgdVec is SGD in place: sgdToAVX2 with p as its own destination.
func sgdVec(p, g []float32, lr float32) bool { return sgdToAVX2(&p[0], &p[0], &g[0], len(p), lr) }

func sgdToVec(dst, p, g []float32, lr float32) bool {
	return sgdToAVX2(&dst[0], &p[0], &g[0], len(p), lr)
}

func sgdKeepVec(p, g []float32, lr float32) bool { return sgdKeepAVX2(&p[0], &g[0], len(p), lr) }

func momentumVec(v, p, g []float32, mu, lr float32) bool {
	return momentumAVX2(&v[0], &p[0], &g[0], len(p), mu, lr)
}

func accumulateVec(dst, x []float32) { accumulateAVX2(&dst[0], &x[0], len(dst)) }
