package data

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckMNIST: the real files pass; a missing directory, a missing file
// and a truncated file each fail with a message naming where and what, and
// saying how to get the data.
func TestCheckMNIST(t *testing.T) {
	src, err := FindMNIST()
	if err != nil {
		t.Skip("no MNIST here:", err)
	}
	if _, err := CheckMNIST(); err != nil {
		t.Fatalf("CheckMNIST of the real files = %v", err)
	}
	copyAll := func(t *testing.T) string {
		dir := t.TempDir()
		for _, name := range []string{mnistTrainImages, mnistTrainLabels, mnistTestImages, mnistTestLabels} {
			p, err := mnistFile(src, name)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	t.Run("whole copy", func(t *testing.T) {
		dir := copyAll(t)
		t.Setenv("KELPIE_MNIST_DIR", dir)
		if _, err := CheckMNIST(); err != nil {
			t.Fatalf("CheckMNIST = %v", err)
		}
	})
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, dir string)
		want  []string
	}{
		{"missing directory", func(t *testing.T, dir string) { os.RemoveAll(dir) },
			[]string{"MNIST not found at ", "run `make data`"}},
		{"missing labels", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, mnistTestLabels+".gz"))
		}, []string{"MNIST not found at ", mnistTestLabels, "run `make data`"}},
		{"truncated gzip", func(t *testing.T, dir string) {
			p := filepath.Join(dir, mnistTrainImages+".gz")
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()/2); err != nil {
				t.Fatal(err)
			}
		}, []string{"is damaged", mnistTrainImages + ".gz", "run `make data`"}},
		// A 1 KB stub of the file: its last four bytes are no gzip trailer
		// (the message said "the file holds 2356252461").
		{"1 KB of a gzip file", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, mnistTestImages+".gz"), 1024); err != nil {
				t.Fatal(err)
			}
		}, []string{"is damaged", mnistTestImages + ".gz", "truncated: the gzip stream (1024 bytes on disk) breaks off after ",
			"of the 7840000 data bytes", "run `make data`"}},
		{"truncated plain file", func(t *testing.T, dir string) {
			p := filepath.Join(dir, mnistTrainLabels+".gz")
			idx, err := readIDXFile(dir, mnistTrainLabels)
			if err != nil {
				t.Fatal(err)
			}
			os.Remove(p)
			f, _ := os.Create(filepath.Join(dir, mnistTrainLabels))
			idx.Data = idx.Data[:len(idx.Data)-1]
			// Write the header of the whole file, then one byte less.
			head := []byte{0, 0, 8, 1, 0, 0, 0xea, 0x60}
			f.Write(head)
			f.Write(idx.Data)
			f.Close()
		}, []string{"is damaged", mnistTrainLabels, "truncated", "run `make data`"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyAll(t)
			c.spoil(t, dir)
			t.Setenv("KELPIE_MNIST_DIR", dir)
			_, err := CheckMNIST()
			if err == nil {
				t.Fatal("CheckMNIST = nil; want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("CheckMNIST = %q; want it to say %q", err, w)
				}
			}
		})
	}
}
