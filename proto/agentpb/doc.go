// Package agentpb holds the Go code generated from proto/agent.proto:
// the node plane's agent service: the stream between a node's agent and the scheduler (reports up,
// actions down).
package agentpb
