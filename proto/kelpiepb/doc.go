// Package kelpiepb holds the Go code generated from proto/*.proto (the node
// plane's gRPC services and the console plane's messages), plus the few
// hand-written methods the raw-bytes codec needs (payload.go) and the
// console names of action kinds (kinds.go).
package kelpiepb
