package diverge

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRoundTrip(t *testing.T) {
	for _, e := range []*Error{
		{Node: "worker-1", Iteration: 12, What: Loss, Value: math.NaN()},
		{Node: "server-0", Iteration: 3, What: Parameters, Value: math.Inf(1), Detail: "block 4, element 17"},
		{Node: "worker-10", Iteration: 0, What: Gradient, Value: math.Inf(-1)},
		{Node: "server-2", Iteration: 7, What: Parameters, Value: 1e308},
	} {
		// Through a gRPC status and a wrapping error, as a worker sees it.
		wire := status.Error(codes.DataLoss, e.Error())
		got := From(fmt.Errorf("worker 1: iteration 4: server 0 (127.0.0.1:1): %v", wire))
		if got == nil {
			t.Fatalf("From(%q) = nil", e.Error())
		}
		same := got.Node == e.Node && got.Iteration == e.Iteration && got.What == e.What && got.Detail == e.Detail &&
			(got.Value == e.Value || (math.IsNaN(got.Value) && math.IsNaN(e.Value)))
		if !same {
			t.Errorf("From(%q) = %+v; want %+v", e.Error(), got, e)
		}
		if d := From(fmt.Errorf("wrapped: %w", e)); d != e {
			t.Errorf("From(wrapped) = %v; want the same error", d)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, msg := range []string{
		"", "diverged", "diverged: non-finite", "diverged: non-finite loss (NaN) at , iteration 3",
		"diverged: non-finite loss (x) at worker-1, iteration 3", "diverged: non-finite loss (NaN) at worker-1, iteration x",
		"some other error", "diverged: non-finite loss (NaN) at worker 1, iteration 3",
	} {
		if d := Parse(msg); d != nil {
			t.Errorf("Parse(%q) = %+v; want nil", msg, d)
		}
	}
	if From(nil) != nil || From(errors.New("x")) != nil {
		t.Error("From of a plain error is not nil")
	}
}

func TestFirstNonFinite(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	for _, c := range []struct {
		xs   []float32
		want int
	}{
		{nil, -1}, {[]float32{0, 1, -3e38}, -1}, {[]float32{0, inf}, 1}, {[]float32{nan, 1}, 0}, {[]float32{1, 2, -inf}, 2},
	} {
		if got := FirstNonFinite(c.xs); got != c.want {
			t.Errorf("FirstNonFinite(%v) = %d; want %d", c.xs, got, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add((&Error{Node: "worker-1", Iteration: 12, What: Loss, Value: math.NaN()}).Error())
	f.Add("diverged: non-finite parameters (+Inf) at server-0, iteration 3 (block 4)")
	f.Fuzz(func(t *testing.T, msg string) {
		d := Parse(msg)
		if d == nil {
			return
		}
		// What parses prints and parses back the same.
		again := Parse(d.Error())
		if again == nil || again.Node != d.Node || again.Iteration != d.Iteration || again.What != d.What {
			t.Fatalf("Parse(%q) = %+v; its message %q parses as %+v", msg, d, d.Error(), again)
		}
	})
}

// TestFirstNonFiniteEveryPosition: a NaN or an infinity anywhere in slices
// of every length up to a few blocks of the unrolled loop, after finite
// values of every sign and size, is found at its own index.
func TestFirstNonFiniteEveryPosition(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for n := 0; n <= 37; n++ {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = float32(i%7-3) * 1e30 // large but finite
		}
		if got := FirstNonFinite(xs); got != -1 {
			t.Fatalf("FirstNonFinite(%d finite values) = %d; want -1", n, got)
		}
		for at := 0; at < n; at++ {
			for _, b := range bad {
				ys := append([]float32(nil), xs...)
				ys[at] = b
				if at+1 < n {
					ys[n-1] = bad[0] // a later one must not win
				}
				if got := FirstNonFinite(ys); got != at {
					t.Fatalf("FirstNonFinite with %v at %d of %d = %d", b, at, n, got)
				}
			}
		}
	}
}

func BenchmarkFirstNonFinite1MB(b *testing.B) {
	xs := make([]float32, 1<<18)
	for i := range xs {
		xs[i] = float32(i) * 1e-3
	}
	b.SetBytes(int64(4 * len(xs)))
	for b.Loop() {
		if FirstNonFinite(xs) != -1 {
			b.Fatal("found a non-finite value")
		}
	}
}
