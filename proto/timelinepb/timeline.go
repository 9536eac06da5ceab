package timelinepb

import (
	"sort"
	"time"
)

// Start is when a timeline frame's span begins (its time is the end).
func (f *TimelineFrame) Start() time.Time {
	return f.GetTime().AsTime().Add(-time.Duration(f.GetSpanSeconds() * float64(time.Second)))
}

// FrameAt returns the index of the frame that covers t in frames (oldest
// first): the first frame ending at or after t, clamped to the frames
// there are; -1 when there are none.
func FrameAt(frames []*TimelineFrame, t time.Time) int {
	return IndexAt(len(frames), func(i int) time.Time { return frames[i].GetTime().AsTime() }, t)
}

// IndexAt is FrameAt over n frames, oldest first, the i-th ending at
// end(i): for frames kept in another form than messages.
func IndexAt(n int, end func(i int) time.Time, t time.Time) int {
	if n == 0 {
		return -1
	}
	return min(sort.Search(n, func(i int) bool { return !end(i).Before(t) }), n-1)
}
