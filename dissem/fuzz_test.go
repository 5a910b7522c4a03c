package dissem

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
	add(EncodeDeltas([]crdt.Delta{d}))
	add(EncodeAlive(Alive{Origin: crdt.Origin{Node: "n1", Incarnation: 7}, Watermark: 9, Sessions: 3, ClientAddr: "127.0.0.1:7400"}))
	add(EncodeAliveAs(TypeListed, Alive{Origin: crdt.Origin{Node: "n1", Incarnation: 7}, Watermark: 9, Sessions: 3}))
	add(EncodeDigest(TypePull, DigestMsg{From: "n2", Digest: crdt.Digest{{Origin: crdt.Origin{Node: "n1", Incarnation: 7}, Watermark: 4}}}))
	add(EncodeSync(crdt.Sync{{Origin: d.Session.Origin, Watermark: 3, Sessions: []crdt.Session{*d.Session}}}))
	o := crdt.Origin{Node: "n1", Incarnation: 7}
	add(EncodeSyncPage(SyncPage{From: "n1", Next: crdt.PageCursor{Origin: o, After: 3, Started: true}},
		crdt.Sync{{Origin: d.Session.Origin, Watermark: 3, Sessions: []crdt.Session{*d.Session}}}))
	add(EncodeSyncPage(SyncPage{From: "n1", At: crdt.PageCursor{Origin: o, After: 3, Started: true}, Last: true}, nil))
	add(EncodePullPage(DigestMsg{From: "n2", Digest: crdt.Digest{{Origin: o, Watermark: 4}},
		Cursor: crdt.PageCursor{Origin: o, After: 3, Started: true}}))
	// A paged snapshot's pages: its drop pass, and a pull for the start
	// of its full pass.
	add(EncodeSyncPage(SyncPage{From: "n1", Next: crdt.PageCursor{Origin: o, After: 3, Started: true, Pass: crdt.PassDrop}},
		crdt.Sync{{Origin: o, Full: true, Drop: &crdt.DropRange{After: 0, Through: 3, Keep: []crdt.Span{{After: 1, Through: 3}}}}}))
	add(EncodePullPage(DigestMsg{From: "n2", Digest: crdt.Digest{{Origin: o, Watermark: 1}},
		Cursor: crdt.PageCursor{Started: true, Pass: crdt.PassFull}}))
	add(EncodeRouteReq(RouteReq{ID: 1, FromNode: "n1", To: "bob", From: "alice", FromDevice: "web", Body: []byte(`"hi"`)}))
	add(EncodeRouteAck(RouteAck{ID: 1, Delivered: 2}))
	add(EncodeKeyOp(KeyOp{Op: "install", Key: make([]byte, 32), ID: 3, FromNode: "n1"}))
	add(EncodeKickReq(KickReq{ID: 4, FromNode: "n1", User: "bob", Device: "phone"}))
	add(EncodeKickReq(KickReq{ID: 5, FromNode: "n1", User: "bob"}))
	seeds = append(seeds, []byte{}, []byte{WireVersion}, []byte{WireVersion, 200}, []byte{2, 1, 0x90})
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		var again []byte
		switch m.Type {
		case TypeDeltas:
			again, err = EncodeDeltas(m.Deltas)
		case TypeAlive, TypeLeaving, TypeListed:
			again, err = EncodeAliveAs(m.Type, m.Alive)
		case TypePull, TypeState:
			again, err = EncodeDigest(m.Type, m.Digest)
		case TypeSync:
			again, err = EncodeSync(m.Sync)
		case TypeSyncPage:
			again, err = EncodeSyncPage(m.Page, m.Sync)
		case TypePullPage:
			again, err = EncodePullPage(m.Digest)
		case TypeRoute:
			again, err = EncodeRouteReq(m.Route)
		case TypeRouteAck:
			again, err = EncodeRouteAck(m.Ack)
		case TypeKey:
			again, err = EncodeKeyOp(m.Key)
		case TypeKick:
			again, err = EncodeKickReq(m.Kick)
		}
		if err != nil {
			t.Fatalf("re-encode %s: %v", m.Type, err)
		}
		if _, err := Decode(again); err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", m.Type, err)
		}
	})
}

// FuzzDecodeMeta feeds arbitrary node metadata (from memberlist peers) to
// its decoder: errors, never panics, and what it accepts round-trips.
func FuzzDecodeMeta(f *testing.F) {
	f.Add(EncodeMeta(Meta{Incarnation: 1796005238139692766, ClientAddr: "10.0.0.1:7400"}))
	f.Add(EncodeMeta(Meta{}))
	f.Add([]byte{})
	f.Add([]byte{0x92, 0xcf})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			return
		}
		again, err := DecodeMeta(EncodeMeta(m))
		if err != nil || again != m {
			t.Fatalf("Meta %+v does not round-trip: %+v, %v", m, again, err)
		}
	})
}
