package crdt

import (
	"strconv"
	"testing"
)

func TestCensusCountsByOwnerAndProjectedState(t *testing.T) {
	a := newTestReplica(t, "a", 1, Config{})
	b := newTestReplica(t, "b", 1, Config{})
	put := func(r *Replica, user string, st State) Delta {
		t.Helper()
		d, err := r.PutLocal(Session{User: user, Device: "d", ID: "s-" + user, Epoch: 1, State: st}, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	put(a, "u1", StateActive)
	put(a, "u2", StateDisconnected)
	if _, err := a.PutAccountLocal("u1", OverrideAway, "", 1); err != nil {
		t.Fatal(err)
	}
	for _, d := range []Delta{put(b, "v1", StateActive), put(b, "v2", StateActive), put(b, "v3", StateExpired)} {
		if _, _, err := a.Apply(d, 2); err != nil {
			t.Fatal(err)
		}
	}
	c := a.Census()
	want := Census{Local: [NumStates]int{1, 1, 0}, Remote: [NumStates]int{2, 0, 1}, Users: 5, Accounts: 1, Origins: 2}
	if c != want {
		t.Fatalf("census %+v, want %+v", c, want)
	}
	// b's gateway marked down: its active sessions are shown expired.
	a.SetNodeDown("b", 3)
	want.Remote = [NumStates]int{0, 0, 3}
	if c := a.Census(); c != want {
		t.Fatalf("with b down: %+v, want %+v", c, want)
	}
}

func TestWrittenAt(t *testing.T) {
	r := newTestReplica(t, "a", 1, Config{})
	d, err := r.PutLocal(Session{User: "u", Device: "d", ID: "s", Epoch: 1}, 42)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.WrittenAt(); got != 42 {
		t.Fatalf("session delta written at %d, want 42", got)
	}
	d, err = r.PutAccountLocal("u", OverrideAway, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.WrittenAt(); got != d.Account.Stamp.Wall || got < 1000 {
		t.Fatalf("account delta written at %d, stamp %+v", got, d.Account.Stamp)
	}
	d, err = r.PutLastSeen("u", 2000)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.WrittenAt(); got != 2000 {
		t.Fatalf("last-seen delta written at %d, want 2000", got)
	}
	if got := (&Delta{}).WrittenAt(); got != 0 {
		t.Fatalf("empty delta written at %d", got)
	}
}

// BenchmarkCensus is what a metrics scrape pays, under the gateway's lock,
// for the census of a replica of 100,000 sessions: it is kept up to date,
// not walked.
func BenchmarkCensus(b *testing.B) {
	r := newTestReplica(b, "a", 1, Config{})
	for i := range 100_000 {
		if _, err := r.PutLocal(Session{User: "u" + strconv.Itoa(i), Device: "d", ID: "s", Epoch: 1}, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		_ = r.Census()
	}
}
