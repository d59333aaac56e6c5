package crypt

import (
	"fmt"
	"testing"
)

var benchSizes = []int{200, 4096}

func BenchmarkSeal(b *testing.B) {
	r := mustParse(b, "k1:"+keyB64(b))
	for _, n := range benchSizes {
		pt := make([]byte, n)
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := r.Seal(pt, "orders", mid(1)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	r := mustParse(b, "k1:"+keyB64(b))
	for _, n := range benchSizes {
		id, sealed, err := r.Seal(make([]byte, n), "orders", mid(1))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Open(id, sealed, "orders", mid(1)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
