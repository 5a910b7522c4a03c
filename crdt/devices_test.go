package crdt

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// A user with many devices (a client reconnecting without a device name
// gets a new one each time) crosses from the slice index to the map one and
// back out: every step keeps the indexes whole, queries stay sorted by
// device, and an emptied user leaves the index.
func TestManyDevicesOfOneUser(t *testing.T) {
	const n = 3 * devicesListMax
	gw := newTestReplica(t, "gw", 1, Config{})
	obs := newTestReplica(t, "obs", 1, Config{})
	rng := rand.New(rand.NewPCG(1, 2))
	order := rng.Perm(n)
	apply := func(s Session, now int64) {
		t.Helper()
		d, err := gw.PutLocal(s, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := obs.Apply(d, now); err != nil {
			t.Fatal(err)
		}
		for _, r := range []*Replica{gw, obs} {
			if err := r.CheckInvariants(); err != nil {
				t.Fatalf("%s: %v", r.Self().Node, err)
			}
		}
	}
	session := func(i int, state State) Session {
		return Session{User: "u", Device: fmt.Sprintf("d%03d", i), ID: fmt.Sprintf("s%03d", i),
			Epoch: 1, State: state, Groups: []string{"g"}}
	}
	for step, i := range order {
		apply(session(i, StateActive), 1)
		got := obs.UserSessions("u")
		if len(got) != step+1 {
			t.Fatalf("after %d connects, %d sessions", step+1, len(got))
		}
		if !slices.IsSortedFunc(got, func(a, b Session) int { return compareStrings(a.Device, b.Device) }) {
			t.Fatalf("sessions not sorted by device after %d connects", step+1)
		}
	}
	if p := obs.Presence("u"); len(p.Sessions) != n || obs.GroupOnlineCount("g") != 1 {
		t.Fatalf("presence lists %d sessions, group count %d; want %d, 1", len(p.Sessions), obs.GroupOnlineCount("g"), n)
	}
	// End them all; GC past the horizon removes every record.
	for _, i := range order {
		s := session(i, StateDisconnected)
		apply(s, 2)
	}
	if obs.GroupOnlineCount("g") != 0 {
		t.Fatalf("group count %d after every session ended", obs.GroupOnlineCount("g"))
	}
	later := 2 + int64(DefaultTombstoneHorizon+time.Second)
	if st := obs.GC(later); st.Tombstones != n {
		t.Fatalf("GC collected %d tombstones, want %d", st.Tombstones, n)
	}
	if err := obs.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if got := obs.UserSessions("u"); len(got) != 0 || obs.Stats().Users != 0 {
		t.Fatalf("after GC: %d sessions, %d users indexed", len(got), obs.Stats().Users)
	}
}

// TestDevicesMatchesMap runs random adds, removes and lookups on one user's
// device index and a Go map side by side, across its three forms: one
// device inline, a sorted list, and a map past devicesListMax.
func TestDevicesMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var d devices
		ref := map[string]*entry{}
		n := rapid.IntRange(1, 2*devicesListMax+4).Draw(t, "devices")
		device := func() string { return fmt.Sprintf("d%02d", rapid.IntRange(0, n-1).Draw(t, "device")) }
		for range rapid.IntRange(1, 300).Draw(t, "steps") {
			k := device()
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				if ref[k] == nil {
					e := &entry{s: &Session{User: "u", Device: k}}
					d.add(e)
					ref[k] = e
				}
			case 1:
				d.remove(k)
				delete(ref, k)
			default:
				if got := d.get(k); got != ref[k] {
					t.Fatalf("get %s = %p, want %p", k, got, ref[k])
				}
			}
			if d.len() != len(ref) {
				t.Fatalf("len %d, want %d", d.len(), len(ref))
			}
			sorted := d.sorted()
			if len(sorted) != len(ref) {
				t.Fatalf("sorted holds %d, want %d", len(sorted), len(ref))
			}
			for i, e := range sorted {
				if ref[e.s.Device] != e || i > 0 && sorted[i-1].s.Device >= e.s.Device {
					t.Fatalf("sorted %d: %s out of place or not held", i, e.s.Device)
				}
			}
			seen := 0
			d.each(func(e *entry) {
				if ref[e.s.Device] != e {
					t.Fatalf("each yields %s, not held", e.s.Device)
				}
				seen++
			})
			if seen != len(ref) {
				t.Fatalf("each yields %d, want %d", seen, len(ref))
			}
		}
	})
}
