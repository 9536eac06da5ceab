#include "textflag.h"

// AVX2+FMA kernels of the optimizers (kernels_amd64.go). Each takes n, a
// multiple of 32, and works on 32 floats (four YMM registers) per round.
// A finite check rides along: every result r is multiplied by zero and
// summed (r·0 is 0 for a finite r and NaN for NaN and ±Inf), so one
// comparison at the end says whether all results were finite.
// Registers Y0-Y13 only (Y15 is Go's zero register in ABIInternal).

// The finite check: Y8 is zero, Y9-Y12 sum the results times zero.
// FINITE_START clears them; FINITE_ADD4 adds four results (one round);
// FINITE_SUM4 folds the four sums into Y9; FINITE_TEST stores in out
// whether the folded sum is 0 (every result finite).
#define FINITE_START \
	VXORPS Y8, Y8, Y8; \
	VXORPS Y9, Y9, Y9; \
	VXORPS Y10, Y10, Y10; \
	VXORPS Y11, Y11, Y11; \
	VXORPS Y12, Y12, Y12

#define FINITE_ADD4(a, b, c, d) \
	VFMADD231PS Y8, a, Y9; \
	VFMADD231PS Y8, b, Y10; \
	VFMADD231PS Y8, c, Y11; \
	VFMADD231PS Y8, d, Y12

#define FINITE_SUM4 \
	VADDPS Y9, Y10, Y9; \
	VADDPS Y11, Y12, Y11; \
	VADDPS Y9, Y11, Y9

// EQ_OQ: all ones where the sum is 0 (never for NaN).
#define FINITE_TEST(out) \
	VCMPPS $0, Y8, Y9, Y9; \
	VMOVMSKPS Y9, AX; \
	CMPL AX, $0xff; \
	SETEQ out

// func sgdToAVX2(dst, p, grad *float32, n int, lr float32) (finite bool)
// dst[i] = p[i] - lr·grad[i], fused; dst may be p (SGD in place).
TEXT ·sgdToAVX2(SB), NOSPLIT, $0-41
	MOVQ dst+0(FP), BX
	MOVQ p+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ n+24(FP), CX
	MOVSS lr+32(FP), X13
	VBROADCASTSS X13, Y13
	FINITE_START
	SHRQ $5, CX
	JZ sgdtodone
sgdtoloop:
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VFNMADD231PS 0(SI), Y13, Y0
	VFNMADD231PS 32(SI), Y13, Y1
	VFNMADD231PS 64(SI), Y13, Y2
	VFNMADD231PS 96(SI), Y13, Y3
	VMOVUPS Y0, 0(BX)
	VMOVUPS Y1, 32(BX)
	VMOVUPS Y2, 64(BX)
	VMOVUPS Y3, 96(BX)
	FINITE_ADD4(Y0, Y1, Y2, Y3)
	ADDQ $128, BX
	ADDQ $128, DI
	ADDQ $128, SI
	DECQ CX
	JNZ sgdtoloop
sgdtodone:
	FINITE_SUM4
	FINITE_TEST(finite+40(FP))
	VZEROUPPER
	RET

// func sgdKeepAVX2(p, grad *float32, n int, lr float32) (finite bool)
// p[i] = p[i] - lr·grad[i], fused exactly as sgdToAVX2 computes it, and
// grad[i] = the old p[i]: an update in place that can still be undone.
TEXT ·sgdKeepAVX2(SB), NOSPLIT, $0-33
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ n+16(FP), CX
	MOVSS lr+24(FP), X13
	VBROADCASTSS X13, Y13
	FINITE_START
	SHRQ $5, CX
	JZ sgdkeepdone
sgdkeeploop:
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVAPS Y0, Y4
	VMOVAPS Y1, Y5
	VMOVAPS Y2, Y6
	VMOVAPS Y3, Y7
	VFNMADD231PS 0(SI), Y13, Y4
	VFNMADD231PS 32(SI), Y13, Y5
	VFNMADD231PS 64(SI), Y13, Y6
	VFNMADD231PS 96(SI), Y13, Y7
	VMOVUPS Y4, 0(DI)
	VMOVUPS Y5, 32(DI)
	VMOVUPS Y6, 64(DI)
	VMOVUPS Y7, 96(DI)
	VMOVUPS Y0, 0(SI)
	VMOVUPS Y1, 32(SI)
	VMOVUPS Y2, 64(SI)
	VMOVUPS Y3, 96(SI)
	FINITE_ADD4(Y4, Y5, Y6, Y7)
	ADDQ $128, DI
	ADDQ $128, SI
	DECQ CX
	JNZ sgdkeeploop
sgdkeepdone:
	FINITE_SUM4
	FINITE_TEST(finite+32(FP))
	VZEROUPPER
	RET

// func momentumAVX2(v, p, grad *float32, n int, mu, lr float32) (finite bool)
// v[i] = mu·v[i] + grad[i]; p[i] -= lr·v[i], both fused.
TEXT ·momentumAVX2(SB), NOSPLIT, $0-41
	MOVQ v+0(FP), DX
	MOVQ p+8(FP), DI
	MOVQ grad+16(FP), SI
	MOVQ n+24(FP), CX
	MOVSS mu+32(FP), X12
	VBROADCASTSS X12, Y12
	MOVSS lr+36(FP), X13
	VBROADCASTSS X13, Y13
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	SHRQ $5, CX
	JZ momdone
momloop:
	VMOVUPS 0(DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS 64(DX), Y2
	VMOVUPS 96(DX), Y3
	VFMADD213PS 0(SI), Y12, Y0
	VFMADD213PS 32(SI), Y12, Y1
	VFMADD213PS 64(SI), Y12, Y2
	VFMADD213PS 96(SI), Y12, Y3
	VMOVUPS Y0, 0(DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VMOVUPS 0(DI), Y4
	VMOVUPS 32(DI), Y5
	VMOVUPS 64(DI), Y6
	VMOVUPS 96(DI), Y7
	VFNMADD231PS Y0, Y13, Y4
	VFNMADD231PS Y1, Y13, Y5
	VFNMADD231PS Y2, Y13, Y6
	VFNMADD231PS Y3, Y13, Y7
	VMOVUPS Y4, 0(DI)
	VMOVUPS Y5, 32(DI)
	VMOVUPS Y6, 64(DI)
	VMOVUPS Y7, 96(DI)
	VFMADD231PS Y8, Y4, Y9
	VFMADD231PS Y8, Y5, Y10
	VFMADD231PS Y8, Y6, Y9
	VFMADD231PS Y8, Y7, Y10
	ADDQ $128, DX
	ADDQ $128, DI
	ADDQ $128, SI
	DECQ CX
	JNZ momloop
momdone:
	VADDPS Y9, Y10, Y9
	FINITE_TEST(finite+40(FP))
	VZEROUPPER
	RET

// func accumulateAVX2(dst, x *float32, n int)
// dst[i] += x[i].
TEXT ·accumulateAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $5, CX
	JZ accdone
accloop:
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VADDPS 0(DI), Y0, Y0
	VADDPS 32(DI), Y1, Y1
	VADDPS 64(DI), Y2, Y2
	VADDPS 96(DI), Y3, Y3
	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, DI
	ADDQ $128, SI
	DECQ CX
	JNZ accloop
accdone:
	VZEROUPPER
	RET
