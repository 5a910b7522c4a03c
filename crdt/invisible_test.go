package crdt

import (
	"reflect"
	"slices"
	"testing"
)

// The invisible override: the presence holds the devices' status and says
// Invisible; Public is what every other reader sees, an offline user.
func TestAggregateInvisible(t *testing.T) {
	t.Parallel()
	desk := &Session{User: "u", Device: "desk", ID: "s1", Epoch: 1, Gateway: "a", State: StateActive, Status: StatusBusy}
	phone := &Session{User: "u", Device: "phone", ID: "s2", Epoch: 1, Gateway: "b", State: StateActive, Status: StatusAway}
	acct := &Account{User: "u", Override: OverrideInvisible, AuthoritativeDevice: "desk", Text: "heads down", Emoji: "🎧", Until: 100}
	p := Aggregate("u", []*Session{desk, phone}, acct, 99)
	if !p.Invisible || !p.Online || p.Status != UserBusy || len(p.Sessions) != 2 || p.Text != "heads down" {
		t.Fatalf("the user's own view: %+v, want online, busy from the authoritative desk, invisible", p)
	}
	pub := p.Public()
	want := Presence{User: "u", Status: UserOffline, Text: "heads down", Emoji: "🎧", Until: 100}
	if !reflect.DeepEqual(pub, want) {
		t.Fatalf("public view %+v, want %+v (as an offline user with the same text)", pub, want)
	}
	if offline := Aggregate("u", nil, &Account{User: "u", Text: "heads down", Emoji: "🎧", Until: 100}, 99); !pub.Equal(offline) {
		t.Fatalf("invisible %+v differs from offline %+v", pub, offline)
	}
	// Offline and invisible: the user still sees the setting.
	if q := Aggregate("u", nil, acct, 99); !q.Invisible || q.Online {
		t.Fatalf("offline and invisible: %+v", q)
	}
	// At until it lapses with the rest: visible again.
	q := Aggregate("u", []*Session{desk, phone}, acct, 100)
	if q.Invisible || !q.Online || !q.Public().Equal(q) {
		t.Fatalf("lapsed: %+v", q)
	}
	// Without the override Public is the presence itself, and Equal tells
	// the two apart.
	r := Aggregate("u", []*Session{desk, phone}, &Account{User: "u", AuthoritativeDevice: "desk", Text: "heads down", Emoji: "🎧", Until: 100}, 99)
	if !r.Public().Equal(r) || r.Equal(p) || r.Status != p.Status {
		t.Fatalf("visible: %+v", r)
	}
}

func TestOverrideInvisibleNames(t *testing.T) {
	t.Parallel()
	o, err := ParseOverride("invisible")
	if err != nil || o != OverrideInvisible || o.String() != "invisible" {
		t.Fatalf("ParseOverride(invisible) = %v, %v", o, err)
	}
}

// The invisible override gossips (deltas and syncs); a value past it is
// refused.
func TestCodecInvisibleOverride(t *testing.T) {
	t.Parallel()
	o := Origin{Node: "g1", Incarnation: 1}
	a := Account{User: "u", Override: OverrideInvisible, Stamp: Timestamp{Wall: 5}, Writer: "g1", Origin: o, Version: 1}
	d := Delta{Since: 0, Account: &a}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := AppendDeltas(nil, []Delta{d})
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeDeltas(b)
	if err != nil || *got[0].Account != a {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	bad := a
	bad.Override = maxOverrideEnum + 1
	if err := (&Delta{Since: 0, Account: &bad}).Validate(); err == nil {
		t.Fatal("an unknown override validates")
	}
	b, err = AppendDeltas(nil, []Delta{{Since: 0, Account: &bad}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeDeltas(b); err == nil {
		t.Fatal("an unknown override decodes")
	}
}

// GroupInvisibleUsers lists the group's online members whose account is
// invisible, following merges, lapses and account changes.
func TestGroupInvisibleUsers(t *testing.T) {
	t.Parallel()
	a := newTestReplica(t, "a", 1, Config{})
	put := func(user string, groups ...string) {
		t.Helper()
		if _, err := a.PutLocal(Session{User: user, Device: "d", ID: user, Epoch: 1, State: StateActive, Groups: groups}, 1); err != nil {
			t.Fatal(err)
		}
	}
	acct := func(user string, ov Override, until int64) {
		t.Helper()
		if _, err := a.PutAccount(Account{User: user, Override: ov, Until: until}, 1); err != nil {
			t.Fatal(err)
		}
	}
	put("ann", "eng")
	put("bob", "eng", "ops")
	put("cy", "ops")
	acct("bob", OverrideInvisible, 0)
	acct("cy", OverrideInvisible, 50)
	acct("dee", OverrideInvisible, 0) // not online anywhere
	check := func(g string, now int64, want ...string) {
		t.Helper()
		if got := a.GroupInvisibleUsers(g, now); !slices.Equal(got, want) {
			t.Fatalf("%s at %d: %v, want %v", g, now, got, want)
		}
	}
	check("eng", 10, "bob")
	check("ops", 10, "bob", "cy")
	check("ops", 50, "bob") // cy's lapsed
	check("none", 10)
	if !a.Invisible("dee", 10) || a.Invisible("ann", 10) || a.Invisible("cy", 50) {
		t.Fatal("Invisible")
	}
	acct("bob", OverrideDND, 0)
	check("eng", 10)
	// A group larger than the invisible set, and the other way round.
	for _, u := range []string{"e1", "e2", "e3", "e4"} {
		put(u, "big")
	}
	acct("e2", OverrideInvisible, 0)
	check("big", 10, "e2")
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
