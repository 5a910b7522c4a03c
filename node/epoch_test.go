package node

import (
	"math"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// Epochs that cannot grow are refused with a clear error, never accepted
// and then wrapped: a hello whose last_epoch is at or
// above MaxEpoch gets bad_request, and a (user, device) whose epoch reached
// MaxEpoch gets epoch_exhausted, not internal, while the connection stays
// usable for another device.

// TestHelloRefusesHugeLastEpoch: the fault's reproduction. last_epoch
// 2^64-3 used to be accepted, and two reconnects later the epoch wrapped to
// 0 and every hello of the key got internal.
func TestHelloRefusesHugeLastEpoch(t *testing.T) {
	n := newTestNode(t, nil)
	for i, last := range []uint64{math.MaxUint64 - 2, math.MaxUint64, 1 << 60, protocol.MaxEpoch, protocol.MaxEpoch + 1} {
		c := dial(t, n)
		dev := "d" + utoa(uint64(i))
		c.send(map[string]any{"op": "hello", "user": "mallory", "device": dev, "last_epoch": last, "id": 1})
		f := c.expectError(protocol.CodeBadRequest)
		if f.num("id") != 1 {
			t.Fatalf("last_epoch %d: error without the id: %v", last, f)
		}
		// The connection stays open and a sane hello works on it.
		last := crdt.ClockEpochFloor(time.Now().Add(1000 * time.Second).UnixNano()) // past the clock's floor
		w := c.hello("mallory", dev, map[string]any{"last_epoch": last})
		if uint64(w.num("epoch")) != last+1 {
			t.Fatalf("epoch %v after last_epoch %d", w["epoch"], last)
		}
		c.ok(map[string]any{"op": "bye"})
		c.expectClosed()
		if e, ok := sessionOf(n, crdt.Key{User: "mallory", Device: dev}); !ok || e.Epoch != last+1 {
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
	w := a.hello("ann", "phone", map[string]any{"last_epoch": protocol.MaxEpoch - 2})
	if got := uint64(w.num("epoch")); got != protocol.MaxEpoch-1 {
		t.Fatalf("epoch %d, want %d", got, uint64(protocol.MaxEpoch-1))
	}
	// A reconnect without last_epoch takes the last epoch there is.
	b := dial(t, n)
	w = b.hello("ann", "phone")
	if got := uint64(w.num("epoch")); got != protocol.MaxEpoch {
		t.Fatalf("epoch %d, want MaxEpoch %d", got, uint64(protocol.MaxEpoch))
	}
	a.expectError(protocol.CodeSuperseded)
	// The next one cannot grow: refused, and the session at MaxEpoch lives.
	for i := range 3 {
		c := dial(t, n)
		c.send(map[string]any{"op": "hello", "user": "ann", "device": "phone", "id": "h"})
		f := c.expectError(protocol.CodeEpochExhausted)
		if f.str("id") != "h" {
			t.Fatalf("error without the id: %v", f)
		}
		start := time.Now()
		w := c.hello("ann", "tablet"+utoa(uint64(i)))
		if !clockEpoch(w.num("epoch"), start) {
			t.Fatalf("another device got epoch %v", w["epoch"])
		}
		c.ok(map[string]any{"op": "bye"})
	}
	if p := presenceOf(n, "ann"); !p.Online || len(p.Sessions) != 1 || p.Sessions[0].Epoch != protocol.MaxEpoch {
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
	for i, epoch := range []uint64{math.MaxUint64, protocol.MaxEpoch, protocol.MaxEpoch + 5} {
		user := "u" + utoa(uint64(i))
		if err := n.ApplyDeltas([]crdt.Delta{peer.put(user, "d", epoch, crdt.StateDisconnected, crdt.StatusAvailable)}); err != nil {
			t.Fatal(err)
		}
		c := dial(t, n)
		c.send(map[string]any{"op": "hello", "user": user, "device": "d", "last_epoch": 3})
		c.expectError(protocol.CodeEpochExhausted)
		c.send(map[string]any{"op": "hello", "user": user, "device": "d"})
		c.expectError(protocol.CodeEpochExhausted)
		if w := c.hello(user, "other"); !clockEpoch(w.num("epoch"), time.Now().Add(-time.Minute)) {
			t.Fatalf("epoch %v", w["epoch"])
		}
	}
	// Just below the limit still works.
	if err := n.ApplyDeltas([]crdt.Delta{peer.put("v", "d", protocol.MaxEpoch-1, crdt.StateActive, crdt.StatusAvailable)}); err != nil {
		t.Fatal(err)
	}
	if _, w := connect(t, n, "v", "d"); uint64(w.num("epoch")) != protocol.MaxEpoch {
		t.Fatalf("epoch %v, want MaxEpoch", w["epoch"])
	}
	if got := n.Stats().BadRequests; got == 0 {
		t.Fatal("refused hellos not counted")
	}
	checkInvariants(t, n)
}

// TestRestartedGatewayDoesNotReuseEpochs: a gateway just restarted (a fresh
// replica, before anti-entropy brings it the device's records) welcomes a
// client that reconnects without last_epoch. Its epoch must still be above
// the one the device had before the restart, so the old connection's
// disconnect, arriving later, cannot take the live session (the chaos
// harness's seeds 18 and 19: "superseded though the device opened no newer
// connection").
func TestRestartedGatewayDoesNotReuseEpochs(t *testing.T) {
	clock := newFakeClock()
	before := &fakeCluster{}
	old := newTestNode(t, func(c *Config) { c.Clock = clock; c.Cluster = before })
	a, wa := connect(t, old, "alice", "phone")
	a.ok(map[string]any{"op": "bye"})

	clock.Advance(2 * time.Second) // the restart
	fresh := newTestNode(t, func(c *Config) { c.Clock = clock })
	b, wb := connect(t, fresh, "alice", "phone")
	if wb.num("epoch") <= wa.num("epoch") {
		t.Fatalf("epoch %v after a restart, %v before it", wb["epoch"], wa["epoch"])
	}
	// The old life's records arrive (anti-entropy, or a delayed packet).
	if err := fresh.ApplyDeltas(before.published()); err != nil {
		t.Fatal(err)
	}
	b.ok(map[string]any{"op": "status", "status": "away"})
	if p := presenceOf(fresh, "alice"); !p.Online || p.Status != crdt.UserAway {
		t.Fatalf("alice after the old records arrived: %+v", p)
	}
	checkInvariants(t, fresh)
}
