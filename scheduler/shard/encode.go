package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The durable forms are compact binary, varint-coded:
//
//	snapshot: "KSQ" 1 | samples epochs batch batchesPerShard seed | n | n × record
//	record:   "KSR" 1 | body (standalone, Shard.MarshalBinary)
//	body:     id epoch offset length state |owner| owner attempts since |lost| lost seq
//
// A snapshot holds only the shards that were ever fetched (Attempts > 0):
// the others are exactly as New builds them from the config, so a snapshot
// of a fresh queue is a few bytes and one at the end of training about 20
// bytes a shard.
const (
	snapshotMagic = "KSQ\x01"
	recordMagic   = "KSR\x01"
	maxName       = 4096 // longest worker name a record may carry
)

// MarshalBinary is the queue's full state: its config and every shard that
// differs from a fresh queue's. Restore reads it back.
func (q *Queue) MarshalBinary() ([]byte, error) {
	c := q.cfg
	b := []byte(snapshotMagic)
	b = binary.AppendVarint(b, c.Samples)
	b = binary.AppendUvarint(b, uint64(c.Epochs))
	b = binary.AppendUvarint(b, uint64(c.GlobalBatch))
	b = binary.AppendUvarint(b, uint64(c.BatchesPerShard))
	b = binary.AppendVarint(b, c.Seed)
	n := 0
	for _, s := range q.shards {
		if s.Attempts > 0 {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, s := range q.shards {
		if s.Attempts > 0 {
			b = appendRecord(b, s)
		}
	}
	return b, nil
}

// Restore rebuilds a queue from MarshalBinary's bytes.
func Restore(b []byte) (*Queue, error) {
	d := decoder{b: b}
	d.magic(snapshotMagic)
	var c Config
	c.Samples = d.varint()
	c.Epochs = int(d.uvarint())
	c.GlobalBatch = int(d.uvarint())
	c.BatchesPerShard = int(d.uvarint())
	c.Seed = d.varint()
	n := d.uvarint()
	if d.err != nil {
		return nil, fmt.Errorf("shard: restore: %w", d.err)
	}
	q, err := New(c)
	if err != nil {
		return nil, fmt.Errorf("shard: restore: %w", err)
	}
	if n > uint64(q.Total()) {
		return nil, fmt.Errorf("shard: restore: %d records for %d shards", n, q.Total())
	}
	recs := make([]Shard, n)
	for i := range recs {
		recs[i] = d.record()
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("shard: restore: %w", d.err)
	}
	if err := q.Apply(recs...); err != nil {
		return nil, fmt.Errorf("shard: restore: %w", err)
	}
	return q, nil
}

// MarshalBinary is the shard's record: its whole state, for Apply.
func (s Shard) MarshalBinary() ([]byte, error) {
	return appendRecord([]byte(recordMagic), s), nil
}

// UnmarshalBinary reads a record written by MarshalBinary.
func (s *Shard) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	d.magic(recordMagic)
	r := d.record()
	if d.err == nil && len(d.b) > 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("shard: record: %w", d.err)
	}
	*s = r
	return nil
}

func appendRecord(b []byte, s Shard) []byte {
	b = binary.AppendUvarint(b, uint64(s.ID))
	b = binary.AppendUvarint(b, uint64(s.Epoch))
	b = binary.AppendUvarint(b, uint64(s.Offset))
	b = binary.AppendUvarint(b, uint64(s.Length))
	b = binary.AppendUvarint(b, uint64(s.State))
	b = appendString(b, s.Owner)
	b = binary.AppendUvarint(b, uint64(s.Attempts))
	b = binary.AppendVarint(b, int64(s.Since))
	b = appendString(b, s.Lost)
	return binary.AppendVarint(b, s.Seq)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads varints from b, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("truncated")

func (d *decoder) magic(m string) {
	if d.err != nil {
		return
	}
	if len(d.b) < len(m) || string(d.b[:len(m)]) != m {
		d.err = fmt.Errorf("bad header (want %q)", m)
		return
	}
	d.b = d.b[len(m):]
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > maxName || n > uint64(len(d.b)) {
		d.err = fmt.Errorf("string of %d bytes", n)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) record() Shard {
	var s Shard
	s.ID = ID(d.uvarint())
	s.Epoch = int(d.uvarint())
	s.Offset = int64(d.uvarint())
	s.Length = int64(d.uvarint())
	s.State = State(d.uvarint())
	s.Owner = d.string()
	s.Attempts = int(d.uvarint())
	s.Since = time.Duration(d.varint())
	s.Lost = d.string()
	s.Seq = d.varint()
	return s
}
