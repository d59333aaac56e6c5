package spool

import (
	"bytes"
	"testing"
)

// BenchmarkAppend measures one caller appending batches of 100 records of
// 200 bytes to the real filesystem: one write and one fsync per Append.
func BenchmarkAppend(b *testing.B) {
	s, err := Open(b.TempDir(), Options{MaxBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	batch := benchBatch()
	b.SetBytes(100 * 200)
	b.ResetTimer()
	for b.Loop() {
		if err := s.Append(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAppendParallel is the same with concurrent callers, whose
// Appends share fsyncs.
func BenchmarkAppendParallel(b *testing.B) {
	s, err := Open(b.TempDir(), Options{MaxBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	batch := benchBatch()
	b.SetBytes(100 * 200)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Append(batch); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "records/s")
}

func benchBatch() [][]byte {
	batch := make([][]byte, 100)
	for i := range batch {
		batch[i] = bytes.Repeat([]byte{byte('a' + i%26)}, 200)
	}
	return batch
}
