// Package scheduler is kelpie's control plane; the code lives in its subpackages (the Monitor,
// the policies, the data-shard state machine, the job manager, the durable store, the console
// plane and its client, the launchers, the daemon that wires them). This package holds no code:
// its test (deps_test.go) checks docs/design.md's import rules over the whole module with `go list`,
// so a forbidden import fails `go test` instead of waiting for a review:
//
//   - scheduler/... reaches the runtime only through its pure packages (never the parameter
//     servers, workers, models or data loaders) and never tui/, agent/ or cmd/;
//   - scheduler/console/client, the console API's client, imports no other scheduler package;
//   - tui/ imports only themes/, proto/, its own packages and scheduler/console/client;
//   - agent/ imports no scheduler or tui package; runtime/ imports no scheduler, agent or tui;
//   - the pure cores import nothing that does I/O: no os, net or syscall directly, and no net,
//     gRPC or bbolt at any depth.
package scheduler
