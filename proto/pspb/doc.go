// Package pspb holds the Go code generated from proto/ps.proto:
// the parameter-server service (push, pull, table changes, migration), plus the methods the
// raw-bytes codec needs (payload.go).
package pspb
