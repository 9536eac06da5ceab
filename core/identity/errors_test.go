package identity

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
)

// TestLoadErrorsWrapTheirCause: a caller can tell a missing credentials
// file from a bad one (errors.Is), as the launcher's retry does.
func TestLoadErrorsWrapTheirCause(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent.pem"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file: %v; want an error wrapping fs.ErrNotExist", err)
	}
}
