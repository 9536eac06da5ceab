package clock

import (
	"testing"
	"time"
)

func TestFakeTimersFireInOrder(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	a := f.After(2 * time.Second)
	b := f.After(time.Second)
	tk := f.NewTicker(500 * time.Millisecond)
	if f.Waiters() != 3 {
		t.Fatalf("Waiters() = %d; want 3", f.Waiters())
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-b:
		t.Fatal("1s timer fired at 999ms")
	default:
	}
	if got := <-tk.C(); !got.Equal(start.Add(500 * time.Millisecond)) {
		t.Errorf("first tick at %v; want +500ms", got.Sub(start))
	}
	f.Advance(time.Millisecond)
	if got := <-b; !got.Equal(start.Add(time.Second)) {
		t.Errorf("1s timer fired at %v", got.Sub(start))
	}
	f.Advance(time.Second)
	if got := <-a; !got.Equal(start.Add(2 * time.Second)) {
		t.Errorf("2s timer fired at %v", got.Sub(start))
	}
	tk.Stop()
	if f.Waiters() != 0 {
		t.Errorf("Waiters() = %d after stop; want 0", f.Waiters())
	}
	if got := Since(f, start); got != 2*time.Second {
		t.Errorf("Since(start) = %v; want 2s", got)
	}
}

func TestFakeNeverGoesBack(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	f.Set(start.Add(-time.Hour))
	if !f.Now().Equal(start) {
		t.Errorf("Now() = %v after setting it back; want %v", f.Now(), start)
	}
	if got := <-f.After(0); !got.Equal(start) {
		t.Errorf("After(0) = %v; want now", got)
	}
}

func TestWithNow(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := WithNow(Real(), func() time.Time { return at })
	if !c.Now().Equal(at) {
		t.Errorf("Now() = %v; want %v", c.Now(), at)
	}
	if WithNow(Real(), nil) != Real() {
		t.Error("WithNow(c, nil) is not c")
	}
}
