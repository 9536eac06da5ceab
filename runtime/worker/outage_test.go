package worker

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestShardSourceKeepsReportsWhileAway: DONE reports that cannot reach the
// scheduler are kept (training goes on) and sent, each exactly once, with
// the next report or by Flush.
func TestShardSourceKeepsReportsWhileAway(t *testing.T) {
	s, reported, _ := queueSource(4)
	away := true
	inner := s.Report
	s.Report = func(ids []int64) error {
		if away {
			return fmt.Errorf("%w: connection refused", ErrUnavailable)
		}
		return inner(ids)
	}
	// Each iteration takes a whole shard of 4.
	for it := int64(0); it < 2; it++ {
		if _, _, err := s.Next(nil, it, 4); err != nil {
			t.Fatal(err)
		}
		if err := s.Pushed(it); err != nil {
			t.Fatalf("Pushed(%d) while away = %v; want nil (kept)", it, err)
		}
	}
	if len(*reported) != 0 || s.Unsent() != 2 {
		t.Fatalf("while away: reported %v, unsent %d; want none reported, 2 kept", *reported, s.Unsent())
	}
	if err := s.Flush(); !errors.Is(err, ErrUnavailable) || s.Unsent() != 2 {
		t.Fatalf("Flush while away = %v (unsent %d); want ErrUnavailable, 2 kept", err, s.Unsent())
	}
	away = false
	s.Next(nil, 2, 4)
	if err := s.Pushed(2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*reported, []int64{1, 2, 3}) || s.Unsent() != 0 {
		t.Fatalf("back: reported %v (unsent %d); want [1 2 3]", *reported, s.Unsent())
	}
	away = true
	s.Next(nil, 3, 4)
	s.Pushed(3)
	away = false
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*reported, []int64{1, 2, 3, 4}) {
		t.Fatalf("after Flush: reported %v; want [1 2 3 4], each once", *reported)
	}
}
