package crdt

import (
	"maps"
	"testing"
)

// TestActiveByGateway: the per-gateway counts a status page shows follow the
// projection: ended sessions and the sessions of a gateway marked down do not
// count, and the gateway's own sessions count even while it is marked down
// elsewhere.
func TestActiveByGateway(t *testing.T) {
	a := newTestReplica(t, "a", 1, Config{})
	b := newTestReplica(t, "b", 1, Config{})
	put := func(r *Replica, user, dev string, st State) {
		t.Helper()
		d, err := r.PutLocal(Session{User: user, Device: dev, ID: user + dev, Epoch: 1, State: st}, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r != a {
			if _, _, err := a.Apply(d, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(a, "u1", "phone", StateActive)
	put(a, "u2", "phone", StateActive)
	put(b, "u1", "desk", StateActive)
	put(b, "u3", "desk", StateActive)
	put(b, "u4", "desk", StateActive)
	put(b, "u4", "desk", StateDisconnected)
	if got, want := a.ActiveByGateway(), map[string]int{"a": 2, "b": 2}; !maps.Equal(got, want) {
		t.Fatalf("counts %v, want %v", got, want)
	}
	a.SetNodeDown("b", 2)
	if got, want := a.ActiveByGateway(), map[string]int{"a": 2}; !maps.Equal(got, want) {
		t.Fatalf("b down: counts %v, want %v", got, want)
	}
	b.SetNodeDown("b", 2) // a gateway never hides its own sessions
	if got, want := b.ActiveByGateway(), map[string]int{"b": 2}; !maps.Equal(got, want) {
		t.Fatalf("b's own view: counts %v, want %v", got, want)
	}
}
