package timelinepb

import "time"

// Start is when a timeline frame's span begins (its time is the end).
func (f *TimelineFrame) Start() time.Time {
	return f.GetTime().AsTime().Add(-time.Duration(f.GetSpanSeconds() * float64(time.Second)))
}

// FrameAt returns the index of the frame that covers t in frames (oldest
// first): the first frame ending at or after t, clamped to the frames
// there are; -1 when there are none.
func FrameAt(frames []*TimelineFrame, t time.Time) int {
	if len(frames) == 0 {
		return -1
	}
	lo, hi := 0, len(frames)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if frames[mid].GetTime().AsTime().Before(t) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
