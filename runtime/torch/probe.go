package torch

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/kelpie/kelpie/core/spec"
)

// Complete readies a torch spec for the scheduler, which cannot run Python:
// it makes model.script absolute (relative paths are relative to specDir,
// the spec file's directory) and runs the script's model(), train_set() and
// test_set() once to fill in model.tensors, data.samples and
// data.test_samples. Other specs are left alone.
func Complete(s *spec.Spec, specDir string, stderr io.Writer) error {
	if s.Model.Kind != spec.ModelTorch {
		return nil
	}
	script := s.Model.Script
	if !filepath.IsAbs(script) {
		script = filepath.Join(specDir, script)
	}
	abs, err := filepath.Abs(script)
	if err != nil {
		return err
	}
	c, h, err := start(startOptions{Mode: "probe", Script: abs, Seed: s.Data.Seed, Threads: 1, Stderr: stderr})
	if err != nil {
		return err
	}
	c.Close()
	if len(h.Tensors) == 0 {
		return fmt.Errorf("torch script %s: model() has no trainable parameters", abs)
	}
	s.Model.Script = abs
	s.Model.Tensors = s.Model.Tensors[:0]
	for _, t := range h.Tensors {
		s.Model.Tensors = append(s.Model.Tensors, spec.Tensor{Name: t.Name, Rows: t.Rows, Cols: t.Cols, Sparse: t.Sparse})
	}
	s.Data.Samples, s.Data.TestSamples = h.Train, h.Test
	return nil
}

// Init returns the initial dense values of a torch spec's module (a
// parameter server installs its blocks of them): it runs the script's
// model() in a short-lived child, seeded with the job's seed as the
// workers' children are.
func Init(s *spec.Spec, stderr io.Writer) ([][]float32, error) {
	m, err := New(Config{Script: s.Model.Script, Seed: s.Data.Seed, Threads: 1, Stderr: stderr, Want: s.Model.Tensors})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return m.InitDense(s.Data.Seed), nil
}

// FromSpec starts a worker's model for a torch spec; owner as in
// Config.Owner (0: a cold child).
func FromSpec(s *spec.Spec, stderr io.Writer, owner int) (*Model, error) {
	return New(Config{Script: s.Model.Script, Seed: s.Data.Seed, Threads: s.Model.Threads, Stderr: stderr, Want: s.Model.Tensors, Owner: owner})
}
