package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// CTRConfig sets up SyntheticCTR. Zero fields take the defaults in brackets.
type CTRConfig struct {
	Samples     int    // training samples [100000]
	TestSamples int    // test samples [10000]
	Features    uint64 // size of the id space [1<<20], at most MaxCTRFeatures
	Fields      int    // active ids per sample, one per field [8]
	Seed        int64
}

// MaxCTRFeatures bounds the id space so the ground-truth vector stays in memory (1 GiB).
const MaxCTRFeatures = 1 << 28

// Parameters of the generator, fixed so that a seed fully determines the data.
const (
	ctrZipfS    = 1.1  // exponent of the per-field id popularity: P(rank k) ∝ (1+k)^-1.1
	ctrLogitStd = 1.5  // standard deviation of the true logit's id part
	ctrBias     = -0.5 // true bias b*: a little under half the samples are clicks
)

// Truth is the logistic model that generated a CTR dataset: P(y=1 | ids) = sigmoid(Σ W[id] + B).
type Truth struct {
	W []float32
	B float32
}

// WithDefaults returns c with zero fields replaced by their defaults.
func (c CTRConfig) WithDefaults() CTRConfig {
	if c.Samples == 0 {
		c.Samples = 100000
	}
	if c.TestSamples == 0 {
		c.TestSamples = 10000
	}
	if c.Features == 0 {
		c.Features = 1 << 20
	}
	if c.Fields == 0 {
		c.Fields = 8
	}
	return c
}

// Validate reports whether c (after defaults) describes a dataset SyntheticCTR can build.
func (c CTRConfig) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Samples < 0 || c.TestSamples < 0:
		return fmt.Errorf("data: ctr sample counts %d/%d must not be negative", c.Samples, c.TestSamples)
	case c.Fields < 0:
		return fmt.Errorf("data: ctr fields %d must not be negative", c.Fields)
	case c.Features < uint64(c.Fields):
		return fmt.Errorf("data: ctr needs at least one id per field: %d features for %d fields", c.Features, c.Fields)
	case c.Features > MaxCTRFeatures:
		return fmt.Errorf("data: ctr features %d above the limit %d", c.Features, MaxCTRFeatures)
	}
	return nil
}

// SyntheticCTR generates a click-through dataset from a known sparse logistic model.
//
// The id space [0, Features) is split into Fields contiguous ranges; each sample draws one id
// from every range with Zipf-like popularity (a few ids are very frequent, most are rare,
// low ids within a range are the hot ones), and its label is Bernoulli(sigmoid(Σ W[id] + B)).
// W is Gaussian with variance ctrLogitStd²/Fields so the logit's spread does not depend on
// Fields. Truth, training and test samples come from three independent streams of c.Seed.
// SyntheticCTR panics if c is invalid (see Validate).
func SyntheticCTR(c CTRConfig) (train, test Dataset, truth Truth) {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	c = c.WithDefaults()
	seed := uint64(c.Seed)

	tr := rand.New(rand.NewPCG(seed, 0x7275_7468)) // "ruth"
	truth = Truth{W: make([]float32, c.Features), B: ctrBias}
	std := ctrLogitStd / math.Sqrt(float64(c.Fields))
	for i := range truth.W {
		truth.W[i] = float32(tr.NormFloat64() * std)
	}

	info := Info{Sparse: true, Features: c.Features, Classes: 2}
	train = generateCTR(c, info, truth, rand.New(rand.NewPCG(seed, 0x7472_6169)), c.Samples) // "rain"
	test = generateCTR(c, info, truth, rand.New(rand.NewPCG(seed, 0x7465_7374)), c.TestSamples)
	return train, test, truth
}

func generateCTR(c CTRConfig, info Info, truth Truth, r *rand.Rand, n int) *ctr {
	fields := c.Fields
	width := c.Features / uint64(fields)
	starts := make([]uint64, fields)
	zipf := make([]*rand.Zipf, fields)
	for f := range fields {
		starts[f] = uint64(f) * width
		size := width
		if f == fields-1 {
			size = c.Features - starts[f] // the last field takes the remainder
		}
		zipf[f] = rand.NewZipf(r, ctrZipfS, 1, size-1)
	}
	d := &ctr{info: info, fields: fields, keys: make([]uint64, n*fields), labels: make([]byte, n)}
	for i := range n {
		row := d.keys[i*fields : (i+1)*fields]
		logit := float64(truth.B)
		for f := range row {
			id := starts[f] + zipf[f].Uint64()
			row[f] = id
			logit += float64(truth.W[id])
		}
		if r.Float64() < 1/(1+math.Exp(-logit)) {
			d.labels[i] = 1
		}
	}
	return d
}

// ctr is a sparse dataset with a fixed number of ids per sample.
type ctr struct {
	info   Info
	fields int
	keys   []uint64 // n*fields, sample i at [i*fields, (i+1)*fields)
	labels []byte
}

func (d *ctr) Len() int   { return len(d.labels) }
func (d *ctr) Info() Info { return d.info }

func (d *ctr) Fill(b *Batch, idx []int) {
	f := d.fields
	b.N, b.Dim = len(idx), 0
	b.X = b.X[:0]
	b.Keys = resize(b.Keys, len(idx)*f)
	b.Offsets = resize(b.Offsets, len(idx)+1)
	b.Y = resize(b.Y, len(idx))
	for i, s := range idx {
		copy(b.Keys[i*f:(i+1)*f], d.keys[s*f:(s+1)*f])
		b.Offsets[i] = i * f
		b.Y[i] = int32(d.labels[s])
	}
	b.Offsets[len(idx)] = len(idx) * f
}

func (d *ctr) slice(lo, hi int) Dataset {
	return &ctr{info: d.info, fields: d.fields, keys: d.keys[lo*d.fields : hi*d.fields], labels: d.labels[lo:hi]}
}
