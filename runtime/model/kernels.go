package model

// Inner loops over contiguous float32 slices. Re-slicing every operand to len(y) first lets the
// compiler drop the bounds checks inside the loops.

// axpy computes y += a*x.
func axpy(y, x []float32, a float32) {
	x = x[:len(y)]
	for j := range y {
		y[j] += a * x[j]
	}
}

// axpy4 computes y += a0*x0 + a1*x1 + a2*x2 + a3*x3, reading and writing y once for four rows.
func axpy4(y, x0, x1, x2, x3 []float32, a0, a1, a2, a3 float32) {
	x0, x1, x2, x3 = x0[:len(y)], x1[:len(y)], x2[:len(y)], x3[:len(y)]
	for j := range y {
		y[j] += a0*x0[j] + a1*x1[j] + a2*x2[j] + a3*x3[j]
	}
}

// mul sets y = a*x.
func mul(y, x []float32, a float32) {
	x = x[:len(y)]
	for j := range y {
		y[j] = a * x[j]
	}
}

// mul4 sets y = a0*x0 + a1*x1 + a2*x2 + a3*x3.
func mul4(y, x0, x1, x2, x3 []float32, a0, a1, a2, a3 float32) {
	x0, x1, x2, x3 = x0[:len(y)], x1[:len(y)], x2[:len(y)], x3[:len(y)]
	for j := range y {
		y[j] = a0*x0[j] + a1*x1[j] + a2*x2[j] + a3*x3[j]
	}
}

// dot returns x·y with four accumulators, so consecutive adds do not wait on each other.
func dot(x, y []float32) float32 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float32
	for len(x) >= 4 && len(y) >= 4 {
		s0 += x[0] * y[0]
		s1 += x[1] * y[1]
		s2 += x[2] * y[2]
		s3 += x[3] * y[3]
		x, y = x[4:], y[4:]
	}
	for j := range x {
		s0 += x[j] * y[j]
	}
	return (s0 + s1) + (s2 + s3)
}

// dot4 returns x0·y, x1·y, x2·y, x3·y, reading y once.
func dot4(y, x0, x1, x2, x3 []float32) (s0, s1, s2, s3 float32) {
	x0, x1, x2, x3 = x0[:len(y)], x1[:len(y)], x2[:len(y)], x3[:len(y)]
	for j, v := range y {
		s0 += x0[j] * v
		s1 += x1[j] * v
		s2 += x2[j] * v
		s3 += x3[j] * v
	}
	return
}

// add computes y += x.
func add(y, x []float32) {
	x = x[:len(y)]
	for j := range y {
		y[j] += x[j]
	}
}
