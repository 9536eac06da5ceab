package store

import (
	"fmt"
	"slices"
	"testing"
)

func frames(from, n int, tag string) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, []byte(fmt.Sprintf("%s%d", tag, from+i)))
	}
	return out
}

func strs(bs [][]byte) []string {
	var out []string
	for _, b := range bs {
		out = append(out, string(b))
	}
	return out
}

// TestTimeline: appends, a rewrite from the start that shortens the
// timeline (a downsampling), survival across a reopen, and deletion with
// the job or alone.
func TestTimeline(t *testing.T) { eachImpl(t, testTimeline) }

func testTimeline(t *testing.T, im impl) {
	s, path := im.open(t, Options{})
	if got, err := s.LoadTimeline("j"); err != nil || len(got) != 0 {
		t.Fatalf("empty timeline = %q, %v", got, err)
	}
	must(t, s.PutTimeline("j", 0, frames(0, 10, "a")))
	must(t, s.PutTimeline("j", 10, frames(10, 3, "a")))
	got, err := s.LoadTimeline("j")
	if err != nil || !slices.Equal(strs(got), strs(frames(0, 13, "a"))) {
		t.Fatalf("after appends: %q, %v", strs(got), err)
	}
	must(t, s.PutTimeline("j", 0, frames(0, 7, "m"))) // compacted: 7 frames now
	must(t, s.Close())
	s, err = im.reopen(t, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err = s.LoadTimeline("j")
	if err != nil || !slices.Equal(strs(got), strs(frames(0, 7, "m"))) {
		t.Fatalf("after a compaction and a reopen: %q, %v; want m0..m6", strs(got), err)
	}
	if err := s.PutTimeline("j", -1, nil); err == nil {
		t.Error("negative index accepted")
	}
	if err := s.PutTimeline("", 0, nil); err == nil {
		t.Error("empty job name accepted")
	}
	must(t, s.PutJob(JobRecord{Name: "j", State: "completed"}))
	must(t, s.PutTimeline("k", 0, frames(0, 2, "k")))
	must(t, s.DeleteJob("j"))
	if got, _ := s.LoadTimeline("j"); len(got) != 0 {
		t.Errorf("timeline of a deleted job: %q", strs(got))
	}
	must(t, s.DeleteTimeline("k"))
	must(t, s.DeleteTimeline("k")) // twice: nothing to delete is fine
	if got, _ := s.LoadTimeline("k"); len(got) != 0 {
		t.Errorf("deleted timeline: %q", strs(got))
	}
}
