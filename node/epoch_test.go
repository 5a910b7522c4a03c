package node

import (
	"math"
	"testing"

	"github.com/rollcall/rollcall/crdt"
)

// Epochs that cannot grow are refused with a clear error, never accepted
// and then wrapped (issue 13, fault 5): a hello whose last_epoch is at or
// above MaxEpoch gets bad_request, and a (user, device) whose epoch reached
// MaxEpoch gets epoch_exhausted, not internal, while the connection stays
// usable for another device.

// TestHelloRefusesHugeLastEpoch: the fault's reproduction. last_epoch
// 2^64-3 used to be accepted, and two reconnects later the epoch wrapped to
// 0 and every hello of the key got internal.
func TestHelloRefusesHugeLastEpoch(t *testing.T) {
	n := newTestNode(t, nil)
	for i, last := range []uint64{math.MaxUint64 - 2, math.MaxUint64, 1 << 60, MaxEpoch, MaxEpoch + 1} {
		c := dial(t, n)
		dev := "d" + utoa(uint64(i))
		c.send(map[string]any{"op": "hello", "user": "mallory", "device": dev, "last_epoch": last, "id": 1})
		f := c.expectError(CodeBadRequest)
		if f.num("id") != 1 {
			t.Fatalf("last_epoch %d: error without the id: %v", last, f)
		}
		// The connection stays open and a sane hello works on it.
		w := c.hello("mallory", dev, map[string]any{"last_epoch": 6})
		if w.num("epoch") != 7 {
			t.Fatalf("epoch %v after last_epoch 6", w["epoch"])
		}
		c.ok(map[string]any{"op": "bye"})
		c.expectClosed()
		if e, ok := sessionOf(n, crdt.Key{User: "mallory", Device: dev}); !ok || e.Epoch != 7 {
			t.Fatalf("replica holds %+v", e)
		}
	}
}

// TestEpochExhausted: a client may reach MaxEpoch itself (last_epoch just
// below it), and the key's next hello is then refused with epoch_exhausted,
// on a connection that stays open; other devices are unaffected.
func TestEpochExhausted(t *testing.T) {
	n := newTestNode(t, nil)
	a := dial(t, n)
	w := a.hello("ann", "phone", map[string]any{"last_epoch": MaxEpoch - 2})
	if got := uint64(w.num("epoch")); got != MaxEpoch-1 {
		t.Fatalf("epoch %d, want %d", got, uint64(MaxEpoch-1))
	}
	// A reconnect without last_epoch takes the last epoch there is.
	b := dial(t, n)
	w = b.hello("ann", "phone")
	if got := uint64(w.num("epoch")); got != MaxEpoch {
		t.Fatalf("epoch %d, want MaxEpoch %d", got, uint64(MaxEpoch))
	}
	a.expectError(CodeSuperseded)
	// The next one cannot grow: refused, and the session at MaxEpoch lives.
	for i := range 3 {
		c := dial(t, n)
		c.send(map[string]any{"op": "hello", "user": "ann", "device": "phone", "id": "h"})
		f := c.expectError(CodeEpochExhausted)
		if f.str("id") != "h" {
			t.Fatalf("error without the id: %v", f)
		}
		w := c.hello("ann", "tablet"+utoa(uint64(i)))
		if w.num("epoch") != 1 {
			t.Fatalf("another device got epoch %v", w["epoch"])
		}
		c.ok(map[string]any{"op": "bye"})
	}
	if p := presenceOf(n, "ann"); !p.Online || len(p.Sessions) != 1 || p.Sessions[0].Epoch != MaxEpoch {
		t.Fatalf("ann %+v", p)
	}
	b.ok(map[string]any{"op": "status", "status": "away"})
	checkInvariants(t, n)
}

// TestEpochFromPeerExhausts: a replica can learn an epoch of any size from
// a peer (an older gateway, or a corrupt one). A hello for that key is then
// refused with epoch_exhausted, never answered with internal (1 + 2^64-1
// used to wrap to 0, which PutLocal refuses).
func TestEpochFromPeerExhausts(t *testing.T) {
	n := newTestNode(t, nil)
	peer := newRemote(t, "n2")
	for i, epoch := range []uint64{math.MaxUint64, MaxEpoch, MaxEpoch + 5} {
		user := "u" + utoa(uint64(i))
		if err := n.ApplyDeltas([]crdt.Delta{peer.put(user, "d", epoch, crdt.StateDisconnected, crdt.StatusAvailable)}); err != nil {
			t.Fatal(err)
		}
		c := dial(t, n)
		c.send(map[string]any{"op": "hello", "user": user, "device": "d", "last_epoch": 3})
		c.expectError(CodeEpochExhausted)
		c.send(map[string]any{"op": "hello", "user": user, "device": "d"})
		c.expectError(CodeEpochExhausted)
		if w := c.hello(user, "other"); w.num("epoch") != 1 {
			t.Fatalf("epoch %v", w["epoch"])
		}
	}
	// Just below the limit still works.
	if err := n.ApplyDeltas([]crdt.Delta{peer.put("v", "d", MaxEpoch-1, crdt.StateActive, crdt.StatusAvailable)}); err != nil {
		t.Fatal(err)
	}
	if _, w := connect(t, n, "v", "d"); uint64(w.num("epoch")) != MaxEpoch {
		t.Fatalf("epoch %v, want MaxEpoch", w["epoch"])
	}
	if got := n.Stats().BadRequests; got == 0 {
		t.Fatal("refused hellos not counted")
	}
	checkInvariants(t, n)
}
