// Package coordinatorpb holds the Go code generated from proto/coordinator.proto:
// the coordinator service (data shards, the job's blocks and assignment) and the messages the other
// services share.
package coordinatorpb
