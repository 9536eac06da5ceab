// Package torch trains a user's PyTorch module on kelpie's parameter
// servers. The Go worker stays the worker (data shards, push and pull, sync,
// actions, telemetry); a child python3 process running kelpie's small Python
// side (py/child.py, embedded in the binary) computes forward and backward
// passes on request. Parameters and gradients live in shared memory both
// processes map, so only small control messages cross between them
// (docs/torch.md describes the protocol).
package torch

import (
	_ "embed"
	"os"
	"os/exec"
)

//go:embed py/child.py
var childSource string

// PythonEnv names the environment variable that selects the python3 the
// child runs on; by default Debian's /usr/bin/python3 (where python3-torch
// installs), else python3 on PATH.
const PythonEnv = "KELPIE_PYTHON"

// TraceEnv, when set to a file, makes the child append "step T N" for every
// training step: the iteration and the batch size it computed (tests read
// it to see an ADJUST_BS reach the Python side).
const TraceEnv = "KELPIE_TORCH_TRACE"

// MNISTEnv is the variable that carries, to the child, the MNIST directory
// kelpie itself found (examples/torch/mnist_cnn.py reads it).
const MNISTEnv = "KELPIE_MNIST_DIR"

// Python returns the interpreter the child runs on.
func Python() string {
	if p := os.Getenv(PythonEnv); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p
	}
	return "python3"
}

// Packages maps a Python module the child needs to the Debian package that
// provides it.
var Packages = map[string]string{"torch": "python3-torch", "numpy": "python3-numpy"}
