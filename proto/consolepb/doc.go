// Package consolepb holds the Go code generated from proto/console.proto:
// the console API: the messages of the WebSocket between the scheduler and its clients, plus the
// console names of action kinds (kinds.go).
package consolepb
