package shard

import (
	"testing"
	"time"
)

// benchConfig is 100,000 shards: about 50 billion samples at AntDT's B=512,
// M=100, or 10 epochs of a 5-billion-sample set.
var benchConfig = Config{Samples: 10_000 * 512 * 100, Epochs: 10, GlobalBatch: 512, BatchesPerShard: 100, Seed: 1}

func BenchmarkNew(b *testing.B) {
	for b.Loop() {
		if _, err := New(benchConfig); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFetchReport(b *testing.B) {
	q := mustNew(b, benchConfig)
	now := time.Duration(0)
	for b.Loop() {
		now++
		s, ok := q.Fetch("worker-1", now)
		if !ok {
			b.StopTimer()
			q = mustNew(b, benchConfig)
			b.StartTimer()
			continue
		}
		if err := q.Report("worker-1", s.ID, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReleaseRefetch is a worker lost with 4 shards in hand, which
// another worker fetches again.
func BenchmarkReleaseRefetch(b *testing.B) {
	q := mustNew(b, benchConfig)
	for range 4 {
		q.Fetch("a", 0)
	}
	for b.Loop() {
		q.Release("a", 1)
		for range 4 {
			q.Fetch("a", 2)
		}
	}
}

func finishedQueue(b *testing.B) *Queue {
	q := mustNew(b, benchConfig)
	for {
		s, ok := q.Fetch("worker-12", 1)
		if !ok {
			return q
		}
		q.Report("worker-12", s.ID, 2)
	}
}

func BenchmarkMarshalFinished(b *testing.B) {
	q := finishedQueue(b)
	for b.Loop() {
		buf, _ := q.MarshalBinary()
		b.SetBytes(int64(len(buf)))
	}
}

func BenchmarkRestoreFinished(b *testing.B) {
	buf, _ := finishedQueue(b).MarshalBinary()
	for b.Loop() {
		if _, err := Restore(buf); err != nil {
			b.Fatal(err)
		}
	}
}
