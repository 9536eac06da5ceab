package store

import (
	"bytes"
	"testing"
)

func TestStacks(t *testing.T) { eachImpl(t, testStacks) }

// testStacks: a collection comes back as saved, also one larger than an
// etcd value may be (kept in chunks); a new one replaces it; it goes with
// the job's timeline.
func testStacks(t *testing.T, im impl) {
	s, _ := im.open(t, Options{})
	if _, ok, err := s.GetStacks("j"); ok || err != nil {
		t.Fatalf("stacks of a job that has none: ok %v, err %v", ok, err)
	}
	big := bytes.Repeat([]byte("goroutine 1 [running]:\n"), (3*stacksChunk)/23+7)
	for _, want := range [][]byte{big, []byte("== worker-0\nsmall\n"), {}} {
		must(t, s.PutStacks("j", want))
		got, ok, err := s.GetStacks("j")
		if err != nil || !ok || !bytes.Equal(got, want) {
			t.Fatalf("stacks of %d bytes came back as %d bytes (ok %v, err %v)", len(want), len(got), ok, err)
		}
	}
	must(t, s.PutStacks("j", big))
	must(t, s.DeleteTimeline("j"))
	if _, ok, err := s.GetStacks("j"); ok || err != nil {
		t.Fatalf("stacks after the timeline was deleted: ok %v, err %v", ok, err)
	}
}
