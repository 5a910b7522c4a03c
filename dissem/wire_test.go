package dissem

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/crdt"
)

// DigestSize is the length of the digest message EncodeDigest writes, for
// digests of every size class of msgpack's headers and integers.
func TestDigestSizeMatchesTheEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	for _, entries := range []int{0, 1, 15, 16, 200, 3000} {
		for _, from := range []string{"n1", strings.Repeat("f", 40), strings.Repeat("g", 300)} {
			var d crdt.Digest
			for i := range entries {
				e := crdt.DigestEntry{Origin: crdt.Origin{Node: fmt.Sprintf("node-%d%s", i, strings.Repeat("x", rng.IntN(40))),
					Incarnation: rng.Uint64() >> rng.IntN(64)}, Watermark: rng.Uint64() >> rng.IntN(64)}
				for j := range rng.IntN(3) {
					e.Held = append(e.Held, crdt.Span{After: e.Watermark + uint64(10*j+1), Through: e.Watermark + uint64(10*j+5)})
				}
				d = append(d, e)
			}
			m := DigestMsg{From: from, Digest: d}
			b, err := EncodeDigest(TypeState, m)
			if err != nil {
				t.Fatal(err)
			}
			if got := DigestSize(m); got != len(b) {
				t.Fatalf("%d entries from %q: DigestSize %d, encoded %d", entries, from, got, len(b))
			}
		}
	}
}
