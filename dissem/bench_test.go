package dissem

import (
	"fmt"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// Benchmarks of the gossip wire format: what a gateway pays per delta to
// frame its writes for the cluster and to read its peers'.
//
//	go test -run '^$' -bench . -benchmem ./dissem

// benchDeltas returns n connect deltas of one gateway, as PutLocal makes
// them.
func benchDeltas(b *testing.B, n int) []crdt.Delta {
	b.Helper()
	r, err := crdt.NewReplica(crdt.Config{Self: crdt.Origin{Node: "gw01", Incarnation: 1}})
	if err != nil {
		b.Fatal(err)
	}
	ds := make([]crdt.Delta, n)
	for i := range ds {
		s := crdt.Session{User: fmt.Sprintf("user%07d", i), Device: "laptop", ID: fmt.Sprintf("sess%08d", i),
			Epoch: 1, State: crdt.StateActive, Groups: []string{fmt.Sprintf("group%04d", i%100)}, ExpiresAt: int64(time.Minute)}
		if ds[i], err = r.PutLocal(s, 1); err != nil {
			b.Fatal(err)
		}
	}
	return ds
}

// BenchmarkWire encodes and decodes a deltas message (one delta, as the
// publisher sends a lone write, and a batch of 64) and an alive
// announcement.
func BenchmarkWire(b *testing.B) {
	for _, batch := range []int{1, 64} {
		ds := benchDeltas(b, batch)
		msg, err := NewDeltas(ds)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("encode-deltas-%d", batch), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeDeltas(ds); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/delta")
			b.ReportMetric(float64(len(msg.Bytes))/float64(batch), "bytes/delta")
		})
		b.Run(fmt.Sprintf("decode-deltas-%d", batch), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(msg.Bytes)))
			for b.Loop() {
				if _, err := Decode(msg.Bytes); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/delta")
		})
	}
	alive := Alive{Origin: crdt.Origin{Node: "gw01", Incarnation: 1}, Watermark: 12345, Sessions: 1000, ClientAddr: "10.0.0.1:7400"}
	b.Run("encode-alive", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := EncodeAlive(alive); err != nil {
				b.Fatal(err)
			}
		}
	})
}
