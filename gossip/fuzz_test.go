package gossip

import (
	"testing"

	"github.com/rollcall/rollcall/crdt"
)

// FuzzDecodeMessage feeds arbitrary packets to the gossip decoder: it must
// never panic, and whatever it accepts must re-encode to something it
// accepts again.
func FuzzDecodeMessage(f *testing.F) {
	d := testDelta("alice", 3, 2)
	seeds := [][]byte{}
	add := func(b []byte, err error) {
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	add(encodeDeltas([]crdt.Delta{d}))
	add(encodeAlive(alive{Origin: crdt.Origin{Node: "n1", Incarnation: 7}, Watermark: 9, Sessions: 3, ClientAddr: "127.0.0.1:7400"}))
	add(encodeDigestMsg(msgPull, digestMsg{From: "n2", Digest: crdt.Digest{{Origin: crdt.Origin{Node: "n1", Incarnation: 7}, Watermark: 4}}}))
	add(encodeSync(crdt.Sync{{Origin: d.Session.Origin, Watermark: 3, Sessions: []crdt.Session{*d.Session}}}))
	add(encodeRouteReq(routeReq{ID: 1, FromNode: "n1", To: "bob", From: "alice", FromDevice: "web", Body: []byte(`"hi"`)}))
	add(encodeRouteAck(routeAck{ID: 1, Delivered: 2}))
	add(encodeKeyOp(keyOp{Op: "install", Key: make([]byte, 32), ID: 3, FromNode: "n1"}))
	seeds = append(seeds, []byte{}, []byte{wireVersion}, []byte{wireVersion, 200}, []byte{2, 1, 0x90})
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		var again []byte
		switch m.typ {
		case msgDeltas:
			again, err = encodeDeltas(m.deltas)
		case msgAlive, msgLeaving:
			again, err = encodeAliveAs(m.typ, m.alive)
		case msgPull, msgState:
			again, err = encodeDigestMsg(m.typ, m.digest)
		case msgSync:
			again, err = encodeSync(m.sync)
		case msgRoute:
			again, err = encodeRouteReq(m.route)
		case msgRouteAck:
			again, err = encodeRouteAck(m.ack)
		case msgKey:
			again, err = encodeKeyOp(m.key)
		}
		if err != nil {
			t.Fatalf("re-encode %s: %v", m.typ, err)
		}
		if _, err := decodeMessage(again); err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", m.typ, err)
		}
	})
}

// FuzzDecodeMeta feeds arbitrary node metadata (from memberlist peers) to
// its decoder: errors, never panics, and what it accepts round-trips.
func FuzzDecodeMeta(f *testing.F) {
	f.Add(encodeMeta(meta{Incarnation: 1796005238139692766, ClientAddr: "10.0.0.1:7400"}))
	f.Add(encodeMeta(meta{}))
	f.Add([]byte{})
	f.Add([]byte{0x92, 0xcf})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		again, err := decodeMeta(encodeMeta(m))
		if err != nil || again != m {
			t.Fatalf("meta %+v does not round-trip: %+v, %v", m, again, err)
		}
	})
}
