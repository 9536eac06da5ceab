package role

import (
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/runtime/data"
)

// CheckData checks, quickly and without loading it, that the data set the
// job's roles will read on this machine is there and whole (synthetic data
// always is). The scheduler calls it through its configuration
// (manager.Config.CheckData, wired by the CLI) before it launches a job's
// nodes locally, so it never imports the data loaders itself.
func CheckData(s *spec.Spec) error {
	if s.Data.Kind == "synthetic-ctr" {
		return nil
	}
	if s.Data.Kind == spec.DataTorch {
		// The script reads its own data; `kelpie run` ran it once already.
		return nil
	}
	_, err := data.CheckMNIST()
	return err
}
