package data

import (
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// CheckMNIST finds the MNIST files and checks, in milliseconds and without
// decoding them, that each is whole: its IDX header is MNIST's, and the data
// size it declares is the file's (for a gzip'd file, the uncompressed size
// its trailer records). A missing or truncated data set is an error naming
// the file and saying how to get it, so a job fails at once instead of its
// roles crash-looping.
func CheckMNIST() (dir string, err error) {
	dir, err = FindMNIST()
	if err != nil {
		return "", err
	}
	for _, f := range []struct {
		name  string
		dims  int
		first uint32 // samples
	}{{mnistTrainImages, 3, 60000}, {mnistTrainLabels, 1, 60000}, {mnistTestImages, 3, 10000}, {mnistTestLabels, 1, 10000}} {
		path, err := mnistFile(dir, f.name)
		if err != nil {
			return dir, fmt.Errorf("data: MNIST not found at %s (no %s(.gz)); run `make data`", dir, f.name)
		}
		if err := checkIDXFile(path, f.dims, f.first); err != nil {
			return dir, fmt.Errorf("data: MNIST at %s is damaged: %s: %v; run `make data` to fetch it again", dir, filepath.Base(path), err)
		}
	}
	return dir, nil
}

// checkIDXFile checks one IDX file's header and size.
func checkIDXFile(path string, ndims int, samples uint32) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	head := make([]byte, 4+4*ndims)
	var have int64 // data bytes after the header
	var zr *gzip.Reader
	if strings.HasSuffix(path, ".gz") {
		if st.Size() < 18+int64(len(head)) {
			return fmt.Errorf("truncated: %d bytes", st.Size())
		}
		zr, err = gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("not gzip: %v", err)
		}
		if _, err := io.ReadFull(zr, head); err != nil {
			return fmt.Errorf("truncated header: %v", err)
		}
		// The trailer's ISIZE is the uncompressed size mod 2^32 (MNIST's
		// files are far smaller).
		var trailer [4]byte
		if _, err := f.ReadAt(trailer[:], st.Size()-4); err != nil {
			return err
		}
		have = int64(binary.LittleEndian.Uint32(trailer[:])) - int64(len(head))
	} else {
		if _, err := io.ReadFull(f, head); err != nil {
			return fmt.Errorf("truncated header: %v", err)
		}
		have = st.Size() - int64(len(head))
	}
	typ, n, err := idxHeader(head[:4])
	if err != nil {
		return err
	}
	if typ != 0x08 || n != ndims {
		return fmt.Errorf("magic %#02x with %d dims, want 0x08 (ubyte) with %d", typ, n, ndims)
	}
	dims, want := idxDims(typ, head[4:])
	if uint32(dims[0]) != samples {
		return fmt.Errorf("%d samples, want %d", dims[0], samples)
	}
	if have != int64(want) && zr != nil {
		// The trailer of a cut gzip file is whatever bytes the cut left
		// at its end (a 1 KB file "held 2356252461"): count what the
		// stream really holds (only on this error path: it decompresses
		// the file).
		n, err := io.Copy(io.Discard, zr)
		if err != nil {
			return fmt.Errorf("truncated: the gzip stream (%d bytes on disk) breaks off after %d of the %d data bytes dimensions %v need (%v)",
				st.Size(), n, want, dims, err)
		}
		have = n
	}
	if have != int64(want) {
		return fmt.Errorf("truncated or padded: dimensions %v need %d data bytes, the file holds %d", dims, want, have)
	}
	return nil
}
