package crdt

import (
	"fmt"
	"testing"
)

// ActiveSessionCount is what a gateway's per-user session cap counts: the
// sessions the projection shows active, across every gateway, in each form
// with one device and with many, not counting ended
// sessions or those of a gateway marked down.
func TestActiveSessionCount(t *testing.T) {
	a := newTestReplica(t, "a", 1, Config{})
	b := newTestReplica(t, "b", 1, Config{})
	obs := newTestReplica(t, "obs", 1, Config{})
	put := func(r *Replica, i int, st State) {
		t.Helper()
		d, err := r.PutLocal(Session{User: "u", Device: fmt.Sprintf("d%03d", i), ID: fmt.Sprintf("s%03d", i),
			Epoch: 1, State: st}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := obs.Apply(d, 1); err != nil {
			t.Fatal(err)
		}
	}
	want := func(what string, n int) {
		t.Helper()
		if got := obs.ActiveSessionCount("u"); got != n {
			t.Fatalf("%s: ActiveSessionCount = %d, want %d", what, got, n)
		}
		active := 0
		for _, s := range obs.UserSessions("u") {
			if s.State == StateActive {
				active++
			}
		}
		if active != n {
			t.Fatalf("%s: UserSessions shows %d active, want %d", what, active, n)
		}
	}
	const manyDevices = 96
	want("no sessions", 0)
	put(a, 0, StateActive)
	want("one device", 1)
	put(b, 1, StateActive)
	want("two gateways", 2)
	for i := 2; i < manyDevices; i++ {
		put(a, i, StateActive)
	}
	want("many devices", manyDevices)
	put(a, 0, StateDisconnected)
	want("one ended", manyDevices-1)
	obs.SetNodeDown("a", 2)
	want("gateway a marked down", 1)
	obs.SetNodeUp("a")
	want("gateway a back", manyDevices-1)
	if got := obs.ActiveSessionCount("nobody"); got != 0 {
		t.Fatalf("unknown user: %d", got)
	}
}
