package optim

import "math"

// The update kernels. Each reports whether every value it wrote to the
// parameters is finite, so a server learns of a diverging block from the
// update itself instead of a second pass over the block.
//
// On amd64 with AVX2 and FMA, slices of 32 values and more go through the
// vector kernels (kernels_amd64.s), their tails through the same kernels in
// a padded buffer, so every element is updated with fused multiply-adds;
// shorter slices (sparse rows) and other CPUs run the Go loops below.

// lanes is the vector kernels' unit: 32 floats, four 256-bit registers.
const lanes = 32

func sgd(c Config, p, g []float32) bool {
	g = g[:len(p)]
	if !vector || len(p) < lanes {
		return sgdGo(c.LR, p, g)
	}
	n := len(p) &^ (lanes - 1)
	ok := sgdVec(p[:n], g[:n], c.LR)
	return sgdTail(c.LR, p[n:], p[n:], g[n:]) && ok
}

// sgdTail is the vector kernel's SGD of a tail shorter than lanes, padded
// to a whole vector with zeros (which stay finite), into dst.
func sgdTail(lr float32, dst, p, g []float32) bool {
	if len(p) == 0 {
		return true
	}
	var pb, gb [lanes]float32
	copy(pb[:], p)
	copy(gb[:], g)
	ok := sgdVec(pb[:], gb[:], lr)
	copy(dst, pb[:len(p)])
	return ok
}

// sgdTo is sgd out of place: dst gets what sgd would make of p, which is
// only read. Every element is computed exactly as sgd computes it.
func sgdTo(c Config, dst, p, g []float32) bool {
	dst, g = dst[:len(p)], g[:len(p)]
	if !vector || len(p) < lanes {
		copy(dst, p)
		return sgdGo(c.LR, dst, g)
	}
	n := len(p) &^ (lanes - 1)
	ok := sgdToVec(dst[:n], p[:n], g[:n], c.LR)
	return sgdTail(c.LR, dst[n:], p[n:], g[n:]) && ok
}

// sgdKeep is sgd that leaves the old values of p in g, in place of the
// gradient it has used: an update that copying g back into p undoes.
// Every element is computed exactly as sgd computes it.
func sgdKeep(c Config, p, g []float32) bool {
	g = g[:len(p)]
	if !vector || len(p) < lanes {
		return sgdKeepGo(c.LR, p, g)
	}
	n := len(p) &^ (lanes - 1)
	ok := sgdKeepVec(p[:n], g[:n], c.LR)
	if len(p) > n {
		// sgdTail's padded vector, the old values saved first.
		var old [lanes]float32
		copy(old[:], p[n:])
		ok = sgdTail(c.LR, p[n:], p[n:], g[n:]) && ok
		copy(g[n:], old[:])
	}
	return ok
}

// sgdKeepGo is sgdKeep with sgdGo, a piece at a time.
func sgdKeepGo(lr float32, p, g []float32) bool {
	var old [256]float32
	ok := true
	for len(p) > 0 {
		k := copy(old[:], p)
		ok = sgdGo(lr, p[:k], g[:k]) && ok
		copy(g[:k], old[:k])
		p, g = p[k:], g[k:]
	}
	return ok
}

// momentum is heavy-ball momentum in PyTorch's form: v = μv + g; p -= lr·v.
func momentum(c Config, v, p, g []float32) bool {
	v, g = v[:len(p)], g[:len(p)]
	if !vector || len(p) < lanes {
		return momentumGo(c.Momentum, c.LR, v, p, g)
	}
	n := len(p) &^ (lanes - 1)
	ok := momentumVec(v[:n], p[:n], g[:n], c.Momentum, c.LR)
	if t := len(p) - n; t > 0 {
		var vb, pb, gb [lanes]float32
		copy(vb[:], v[n:])
		copy(pb[:], p[n:])
		copy(gb[:], g[n:])
		ok = momentumVec(vb[:], pb[:], gb[:], c.Momentum, c.LR) && ok
		copy(v[n:], vb[:t])
		copy(p[n:], pb[:t])
	}
	return ok
}

// Accumulate adds gradient x into dst (len(x) >= len(dst)): a server
// summing workers' gradients of one version, a worker summing its
// micro-batches' gradients.
func Accumulate(dst, x []float32) {
	x = x[:len(dst)]
	n := 0
	if vector && len(dst) >= lanes {
		n = len(dst) &^ (lanes - 1)
		accumulateVec(dst[:n], x[:n]) // additions: the same results as the loop
	}
	accumulateGo(dst[n:], x[n:])
}

func sgdGo(lr float32, p, g []float32) bool {
	g = g[:len(p)]
	// z sums r-r over the results r: 0 while all are finite, NaN after
	// the first NaN or ±Inf.
	var z0, z1 float32
	i := 0
	for ; i+4 <= len(p); i += 4 {
		pp, gg := p[i:i+4:i+4], g[i:i+4:i+4]
		a0, a1, a2, a3 := pp[0]-lr*gg[0], pp[1]-lr*gg[1], pp[2]-lr*gg[2], pp[3]-lr*gg[3]
		pp[0], pp[1], pp[2], pp[3] = a0, a1, a2, a3
		z0 += (a0 - a0) + (a2 - a2)
		z1 += (a1 - a1) + (a3 - a3)
	}
	for ; i < len(p); i++ {
		a := p[i] - lr*g[i]
		p[i] = a
		z0 += a - a
	}
	return z0+z1 == 0
}

func momentumGo(mu, lr float32, v, p, g []float32) bool {
	v, g = v[:len(p)], g[:len(p)]
	var z float32
	for i := range p {
		v[i] = mu*v[i] + g[i]
		a := p[i] - lr*v[i]
		p[i] = a
		z += a - a
	}
	return z == 0
}

func accumulateGo(dst, x []float32) {
	x = x[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d, s := dst[i:i+4:i+4], x[i:i+4:i+4]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
	}
	for ; i < len(dst); i++ {
		dst[i] += x[i]
	}
}

// adam is Adam (Kingma & Ba) at step t ≥ 1:
//
//	m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;  p -= lr · m̂ / (√v̂ + ε)
//
// with m̂ = m/(1-β1^t), v̂ = v/(1-β2^t). The bias corrections are folded into one step size and
// a rescaled ε (lr·√(1-β2^t)/(1-β1^t) and ε·√(1-β2^t)), which is algebraically the same.
func adam(c Config, t int64, m, v, p, g []float32) bool {
	c1 := 1 - math.Pow(float64(c.Beta1), float64(t))
	c2 := math.Sqrt(1 - math.Pow(float64(c.Beta2), float64(t)))
	step := float32(float64(c.LR) * c2 / c1)
	eps := float32(float64(c.Eps) * c2)
	b1, b2 := c.Beta1, c.Beta2
	m, v, g = m[:len(p)], v[:len(p)], g[:len(p)]
	var z float32
	for i := range p {
		gi := g[i]
		m[i] = b1*m[i] + (1-b1)*gi
		v[i] = b2*v[i] + (1-b2)*gi*gi
		a := p[i] - step*m[i]/(float32(math.Sqrt(float64(v[i])))+eps)
		p[i] = a
		z += a - a
	}
	return z == 0
}
