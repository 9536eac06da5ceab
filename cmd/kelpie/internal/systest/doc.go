// Package systest holds system tests that need the scheduler and the runtime in one test binary:
// attacks on a live job's data plane (which dial it with the runtime's framed client) and torch
// jobs (which the runtime's torch package readies, as `kelpie run` does). The import rules keep
// scheduler/ free of runtime/ packages, tests included (scheduler/deps_test.go), so these tests
// live beside the CLI that wires both. The package has no code of its own.
package systest
