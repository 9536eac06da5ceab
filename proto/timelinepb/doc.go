// Package timelinepb holds the Go code generated from proto/timeline.proto:
// the recorded timeline's frames, plus helpers to find a frame by time (timeline.go).
package timelinepb
