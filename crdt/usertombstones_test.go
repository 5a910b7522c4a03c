package crdt

import (
	"fmt"
	"testing"
)

// TestTombstonesPerUserCapped: a user who ends sessions on ever new
// devices keeps at most MaxTombstonesPerUser tombstones, in the writer's
// replica and in one that applies its deltas; the oldest go first, their
// epochs stay as floors (the next epoch of a collected key is issued
// above it), and the user's active sessions are untouched.
func TestTombstonesPerUserCapped(t *testing.T) {
	const limit = 4
	a := newTestReplica(t, "a", 1, Config{MaxTombstonesPerUser: limit})
	obs := newTestReplica(t, "obs", 1, Config{MaxTombstonesPerUser: limit})
	put := func(device string, epoch uint64, st State, now int64) {
		t.Helper()
		d, err := a.PutLocal(Session{User: "u", Device: device, ID: device, Epoch: epoch, State: st}, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := obs.Apply(d, now); err != nil {
			t.Fatal(err)
		}
	}
	put("phone", 1, StateActive, 1)
	for i := range 10 {
		dev := fmt.Sprintf("d%02d", i)
		put(dev, 5, StateActive, int64(10+i))
		put(dev, 5, StateDisconnected, int64(10+i))
	}
	for _, r := range []*Replica{a, obs} {
		ended := 0
		for _, s := range r.UserSessions("u") {
			if s.State.Terminal() {
				ended++
			}
		}
		if ended != limit {
			t.Fatalf("%v holds %d tombstones, want %d", r.Self(), ended, limit)
		}
		if _, ok := r.Session(Key{User: "u", Device: "d05"}); ok {
			t.Fatalf("%v holds d05's tombstone, one of the oldest", r.Self())
		}
		if _, ok := r.Session(Key{User: "u", Device: "d09"}); !ok {
			t.Fatalf("%v lost the newest tombstone", r.Self())
		}
		if p := r.Presence("u", 0); !p.Online || len(p.Sessions) != 1 {
			t.Fatalf("%v: presence %+v, want phone online", r.Self(), p)
		}
		if got := r.MaxEpoch(Key{User: "u", Device: "d00"}); got != 5 {
			t.Fatalf("%v: MaxEpoch of a collected key %d, want its floor 5", r.Self(), got)
		}
		if err := r.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
}
